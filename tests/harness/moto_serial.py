"""moto's server, applying one request at a time.

DynamoDB applies each conditional write atomically; moto's threaded server does not (two
concurrent conditional updates of one item can both succeed). tocsin's tests exercise exactly
those races, so every request runs under one lock here: connections stay concurrent, the
emulated services see requests one by one.

moto has no backend for AWS End User Messaging SMS (`pinpoint-sms-voice-v2`): requests whose
X-Amz-Target starts with `PinpointSMSVoiceV2.`, and the stand-in's control API under `/tocsin-eum/`,
go to eum_standin.py instead, under the same lock (it writes its events into moto's CloudWatch Logs
backend, in this process). FilterLogEvents pages and ingests as AWS does when a test asks
(logs_as_aws.py, control API `/tocsin-logs/`). `POST /moto-api/reset` resets both too.

With `TOCSIN_EMULATOR_STDIN_LIFELINE=1`, the process exits when its standard input reaches end of
file: the harness keeps a pipe to it open for as long as the test process lives (an idle emulator
waits between tests for the next one, reset), so none outlives the test process, however it ends.

`GET /tocsin-emulator/id` answers the instance id the harness gave in `TOCSIN_EMULATOR_ID`: the
harness picks a free port and releases it before this binds it, so a parallel test may start its
own emulator on the same port; only the one that answers its own id is the harness's (the other
exits with "Address already in use").

Usage: python moto_serial.py HOST PORT
"""

import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # eum_standin, beside this file

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)

from eum_standin import StandIn
import logs_as_aws
from moto.logs.models import LogsBackend


def exit_with_stdin() -> None:
    """Exits the process when standard input closes (the harness's process ended)."""
    while sys.stdin.buffer.read(4096):
        pass
    os._exit(0)


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    if os.environ.get("TOCSIN_EMULATOR_STDIN_LIFELINE") == "1":
        threading.Thread(target=exit_with_stdin, daemon=True).start()
    os.environ.setdefault("MOTO_PORT", str(port))
    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()
    eum = StandIn()
    logs_as_aws.install(LogsBackend)
    instance = os.environ.get("TOCSIN_EMULATOR_ID", "").encode()

    def serial(environ, start_response):
        if environ.get("PATH_INFO") == "/tocsin-emulator/id":
            start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(instance)))])
            return [instance]
        with lock:
            shaped = logs_as_aws.control(environ)
            if shaped is not None:
                status, body = shaped
                data = json.dumps(body).encode()
                start_response(f"{status} {'OK' if status == 200 else 'Bad Request'}", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
                return [data]
            answer = eum.wsgi(environ, start_response)
            if answer is not None:
                return answer
            # Materialise the response inside the lock: the request is applied whole.
            response = list(app(environ, start_response))
            if environ.get("PATH_INFO") == "/moto-api/reset" and environ.get("REQUEST_METHOD") == "POST":
                eum.reset()
                logs_as_aws.reset()
            return response

    run_simple(host, port, serial, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
