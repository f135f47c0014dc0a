/*
 * The XML of S3's answers (listings, errors, multipart uploads) read with
 * expat: each element's path and text go to a callback at its end tag,
 * which is all these flat documents need. Bounded: the answer itself (the
 * client reads at most S3_MAX_BODY), the text of one element
 * (S3_XML_TEXT) and the depth kept in the path (deeper elements are
 * skipped, their paths never match).
 */
#include "s3.h"

#include <string.h>

#include <expat.h>

#define PATH_MAX_LEN 256
#define MAX_DEPTH 16

struct walk {
	XML_Parser parser;
	s3_xml_cb cb;
	void *arg;
	char path[PATH_MAX_LEN];
	size_t ends[MAX_DEPTH + 1];	/* path length at each depth */
	int depth;			/* may pass MAX_DEPTH: skipped */
	char text[S3_XML_TEXT + 1];
	size_t len;
	int failed;
};

static void
stop(struct walk *w)
{
	w->failed = 1;
	XML_StopParser(w->parser, XML_FALSE);
}

static void XMLCALL
start_cb(void *arg, const XML_Char *name, const XML_Char **attrs)
{
	struct walk *w = arg;
	size_t at = w->ends[w->depth < MAX_DEPTH ? w->depth : MAX_DEPTH];
	size_t n = strlen(name);

	(void)attrs;
	w->depth++;
	w->len = 0;
	if (w->depth > MAX_DEPTH)
		return;
	if (at + n + 2 > sizeof w->path) {
		stop(w);
		return;
	}
	if (at > 0)
		w->path[at++] = '/';
	memcpy(w->path + at, name, n + 1);
	w->ends[w->depth] = at + n;
}

static void XMLCALL
text_cb(void *arg, const XML_Char *s, int len)
{
	struct walk *w = arg;

	if (w->len + (size_t)len > S3_XML_TEXT) {
		stop(w);
		return;
	}
	memcpy(w->text + w->len, s, (size_t)len);
	w->len += (size_t)len;
}

static void XMLCALL
end_cb(void *arg, const XML_Char *name)
{
	struct walk *w = arg;

	(void)name;
	if (w->depth <= MAX_DEPTH && !w->failed) {
		w->path[w->ends[w->depth]] = '\0';
		w->text[w->len] = '\0';
		if (w->cb(w->path, w->text, w->arg) < 0)
			stop(w);
	}
	w->depth--;
	w->len = 0;
}

int
s3_xml_parse(const char *xml, size_t len, s3_xml_cb cb, void *arg)
{
	struct walk w = { 0 };
	enum XML_Status st;

	w.parser = XML_ParserCreate("UTF-8");
	if (w.parser == NULL)
		return -1;
	w.cb = cb;
	w.arg = arg;
	XML_SetUserData(w.parser, &w);
	XML_SetElementHandler(w.parser, start_cb, end_cb);
	XML_SetCharacterDataHandler(w.parser, text_cb);
	st = XML_Parse(w.parser, xml, (int)len, XML_TRUE);
	XML_ParserFree(w.parser);
	return st == XML_STATUS_OK && !w.failed ? 0 : -1;
}
