"""The reference for run_shell_command in `make bench` (tools/bench/run
shell): what the in-container Python server we replace does, FastAPI on
uvicorn (Debian's python3-fastapi and python3-uvicorn), the command run by
asyncio.create_subprocess_shell (/bin/sh -c) with stdout and stderr pipes
and communicate(), the same JSON answer as the agent's.

    SECRET_TOKEN=... python3 ref_shell_server.py PORT WORKSPACE
"""
import asyncio
import os
import sys

import uvicorn
from fastapi import FastAPI, Header, HTTPException, Request

app = FastAPI()
TOKEN = os.environ["SECRET_TOKEN"]
WORKSPACE = sys.argv[2]


def check(authorization):
    if authorization != f"Bearer {TOKEN}":
        raise HTTPException(status_code=403, detail="Invalid token")


@app.get("/healthz")
async def healthz(authorization: str = Header(None)):
    check(authorization)
    return "OK"


@app.post("/tools/run_shell_command")
async def run_shell_command(request: Request,
                            authorization: str = Header(None)):
    check(authorization)
    body = await request.json()
    proc = await asyncio.create_subprocess_shell(
        body["command"], stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=WORKSPACE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(),
                                          body.get("timeout", 300))
    except asyncio.TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
    content = [{"type": "text", "text": out.decode(errors="replace"),
                "description": "stdout"}]
    if err:
        content.append({"type": "text", "text": err.decode(errors="replace"),
                        "description": "stderr"})
    content.append({"type": "text", "text": str(proc.returncode),
                    "description": "returncode"})
    return {"meta": None, "content": content, "isError": bool(err)}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]),
                log_level="warning", access_log=False)
