"""moto's server, applying one request at a time.

DynamoDB applies each conditional write atomically; moto's threaded server does not (two
concurrent conditional updates of one item can both succeed). tocsin's tests exercise exactly
those races, so every request runs under one lock here: connections stay concurrent, the
emulated services see requests one by one. Usage: python moto_serial.py HOST PORT
"""

import os
import sys
import threading

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("MOTO_PORT", str(port))
    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def serial(environ, start_response):
        with lock:
            # Materialise the response inside the lock: the request is applied whole.
            return list(app(environ, start_response))

    run_simple(host, port, serial, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
