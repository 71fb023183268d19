"""Free TCP ports on 127.0.0.1, for the servers the workflow starts (the local S3 server, the
distributed trainer's rendezvous)."""

import socket
from contextlib import ExitStack


def free_ports(count: int) -> list[int]:
    """Distinct free ports (all bound at once, so none is handed out twice)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
