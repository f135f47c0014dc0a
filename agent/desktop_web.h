/*
 * The desktop in a web browser: GET /vnc/{path} serves noVNC's files (the
 * desktop file's "novnc" directory) and our own page, vnc_relay.html
 * (desktop_web.c); GET /websockify is a WebSocket relayed to the display's
 * VNC server (vnc_relay.c).
 *
 * Auth: a browser cannot put an Authorization header on a page or a
 * WebSocket, so these routes also take the agent's token as the
 * "password" query parameter (a page opened straight on the agent), and
 * /vnc/ takes it from a cookie the page sets for the files it loads next
 * (noVNC's modules import each other by relative URL, without the
 * query). The WebSocket never takes the cookie: a page of another site
 * could make the browser send it. Through sandboxd, a desktop link's own
 * token is checked there, and the agent gets sandboxd's header (and
 * view_only=true for a view link).
 */
#ifndef DESKTOP_WEB_H
#define DESKTOP_WEB_H

struct agent;
struct http_request;

/* The cookie vnc_relay.html sets: the token, for its directory only. */
#define DESKTOP_WEB_COOKIE "sandbox_vnc"

/* Whether req holds the token (the header, the "password" parameter, or
 * with cookie the cookie too). When not, req is answered with the
 * agent's fixed 403 and 0 returned. */
int desktop_web_authorize(struct agent *agent, struct http_request *req,
    int cookie);

/* GET /vnc/{path} */
void desktop_web_route(struct http_request *req, void *arg);

/* GET /websockify: the relay (vnc_relay.c). */
void vnc_relay_route(struct http_request *req, void *arg);
/* Viewers now relayed. */
unsigned vnc_relay_count(void);

#endif
