"""A scripted MCP stdio peer for the protocol corners the npm servers never
show: a paginated tools/list, answers out of order and in a batch, requests
of the server's own (ping, and one the client must refuse), notifications
between answers, a list that changes, a call that never ends, an endless
line. It is not a proof that the agent works with real servers (the tests
against server-everything and server-filesystem are); it checks how the
agent's JSON-RPC side behaves when a server does these legal things.

Run by the agent as {"command": "/usr/bin/python3", "args": [this file]}.
"""
import json
import sys

seen = []          # what the client sent us that was not a request
held = []          # ids of "slow" calls waiting for a "fast" one
tools = {
    "slow": "answered only after a fast call came in",
    "fast": "answered at once, in a batch with a notification",
    "seen": "what the client answered to our requests, and its notifications",
    "add_more": "adds the tool 'late' and says the list changed",
    "hang": "never answered",
    "flood": "writes a line longer than any client should take",
}


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def tool(name):
    return {"name": name, "description": tools[name],
            "inputSchema": {"type": "object", "properties": {"n": {"type": "number"}}}}


def text_result(text):
    return {"content": [{"type": "text", "text": text}], "isError": False}


def log(text):
    send({"jsonrpc": "2.0", "method": "notifications/message",
          "params": {"level": "info", "data": text}})


def handle(msg):
    method, mid = msg.get("method"), msg.get("id")
    if method is None or mid is None:
        seen.append(msg)
        return
    params = msg.get("params") or {}
    if method == "initialize":
        # Our own requests before we answer: the client must answer them.
        send({"jsonrpc": "2.0", "id": "ping-1", "method": "ping"})
        send({"jsonrpc": "2.0", "id": "ask-1", "method": "sampling/createMessage",
              "params": {"messages": [], "maxTokens": 1}})
        # An answer to nothing the client asked: to be ignored.
        send({"jsonrpc": "2.0", "id": 999999, "result": {}})
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": "2025-03-26",
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "scripted-peer", "version": "1"}}})
    elif method == "tools/list":
        names = sorted(tools)
        half = len(names) // 2
        if params.get("cursor") is None:
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "tools": [tool(n) for n in names[:half]], "nextCursor": "page-2"}})
        else:
            assert params["cursor"] == "page-2", params
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "tools": [tool(n) for n in names[half:]]}})
    elif method == "tools/call":
        name = params["name"]
        n = params.get("arguments", {}).get("n")
        if name == "slow":
            held.append((mid, n))
        elif name == "fast":
            log("fast call")
            send([{"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": "x", "progress": 1}},
                  {"jsonrpc": "2.0", "id": mid, "result": text_result(f"fast {n}")}])
            while held:
                hid, hn = held.pop(0)
                send({"jsonrpc": "2.0", "id": hid, "result": text_result(f"slow {hn}")})
        elif name == "seen":
            send({"jsonrpc": "2.0", "id": mid, "result": text_result(json.dumps(seen))})
        elif name == "add_more":
            tools["late"] = "added while running"
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            send({"jsonrpc": "2.0", "id": mid, "result": text_result("added")})
        elif name == "late":
            send({"jsonrpc": "2.0", "id": mid, "result": text_result("late one")})
        elif name == "hang":
            pass
        elif name == "flood":
            chunk = "x" * (1 << 20)
            for _ in range(70):
                sys.stdout.write(chunk)
            sys.stdout.flush()
        else:
            send({"jsonrpc": "2.0", "id": mid,
                  "error": {"code": -32602, "message": f"Tool {name} not found"}})
    else:
        send({"jsonrpc": "2.0", "id": mid,
              "error": {"code": -32601, "message": "Method not found"}})


def main():
    sys.stderr.write("scripted peer up\n")
    sys.stderr.flush()
    for line in sys.stdin:
        if line.strip():
            handle(json.loads(line))


if __name__ == "__main__":
    main()
