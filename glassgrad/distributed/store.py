"""A small TCP key-value store: how the processes of a group find each other and swap small messages.

Rank 0 runs `StoreServer` on MASTER_ADDR:MASTER_PORT; every rank (rank 0 too) talks to it through a `TCPStore`
client: `set`, `get` (waits until the key is there), `add` (an atomic counter), `delete_prefix`. NCCL's unique id
crosses here, and so does the CPU backend's data (glassgrad/distributed/copy_backend.py).

The wire format is plain bytes, never pickle (anyone who reaches the port could run code through a pickle): a
request is a header (op, key length, value length, timeout) then the key and the value; a reply is a status and a
payload.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time

REQUEST = struct.Struct("<BIQd")  # op, key bytes, value bytes, timeout in seconds
REPLY = struct.Struct("<BQ")  # status, payload bytes
SET, GET, ADD, DELETE_PREFIX, CHECK = range(1, 6)
OK, TIMED_OUT, FAILED = range(3)


class DistError(RuntimeError):
    """A process group failed (torch.distributed.DistError)."""


class DistNetworkError(DistError, ConnectionError):
    """The store cannot be reached, or its connection broke (torch.distributed.DistNetworkError)."""


class DistStoreError(DistError, TimeoutError):
    """A store operation timed out waiting for other ranks (torch.distributed.DistStoreError)."""


def _recv_exact(sock: socket.socket, nbytes: int) -> bytes:
    chunks, left = [], nbytes
    while left:
        chunk = sock.recv(min(left, 1 << 22))
        if not chunk:
            raise ConnectionError("the connection closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class _Handler(socketserver.BaseRequestHandler):
    """Serves one client's requests, one after another, until it disconnects."""

    def handle(self) -> None:
        server: StoreServer = self.server  # type: ignore[assignment]
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            try:
                op, key_len, value_len, timeout = REQUEST.unpack(_recv_exact(self.request, REQUEST.size))
                key = _recv_exact(self.request, key_len).decode()
                value = _recv_exact(self.request, value_len)
            except (ConnectionError, OSError):
                return
            status, payload = server.serve(op, key, value, timeout)
            self.request.sendall(REPLY.pack(status, len(payload)) + payload)


class StoreServer(socketserver.ThreadingTCPServer):
    """The store itself: a dict under a condition variable, served to each client on a thread of its own."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int):
        """Serve on `port` of every interface, or of the loopback one alone where `host` (MASTER_ADDR) is local."""
        self.data: dict[str, bytes] = {}
        self.changed = threading.Condition()
        super().__init__(("127.0.0.1" if _is_loopback(host) else "", port), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, name="glassgrad-store", daemon=True)
        self.thread.start()

    def serve(self, op: int, key: str, value: bytes, timeout: float) -> tuple[int, bytes]:
        with self.changed:
            if op == SET:
                self.data[key] = value
                self.changed.notify_all()
                return OK, b""
            if op == GET:
                if not self.changed.wait_for(lambda: key in self.data, timeout):
                    return TIMED_OUT, b""
                return OK, self.data[key]
            if op == ADD:
                total = int(self.data.get(key, b"0")) + int(value)
                self.data[key] = str(total).encode()
                self.changed.notify_all()
                return OK, self.data[key]
            if op == DELETE_PREFIX:
                for k in [k for k in self.data if k.startswith(key)]:
                    del self.data[k]
                return OK, b""
            if op == CHECK:
                return OK, b"1" if key in self.data else b"0"
        return FAILED, f"unknown store operation {op}".encode()

    def close(self) -> None:
        """Stop serving and free the port."""
        self.shutdown()
        self.server_close()


class TCPStore:
    """A client of the store at host:port (torch.distributed.TCPStore's methods); `is_master` also starts the server.

    Connecting retries until `timeout` seconds have passed (rank 0 may start its server after the others start)."""

    def __init__(self, host: str, port: int, is_master: bool = False, timeout: float = 300.0):
        self.host, self.port, self.timeout = host, port, timeout
        self.server: StoreServer | None = None
        if is_master:
            try:
                self.server = StoreServer(host, port)
            except OSError as e:
                raise DistNetworkError(f"glassgrad.distributed: cannot start the store on port {port} of this host "
                                       f"({e.strerror or e}); choose another MASTER_PORT") from None  # fmt: skip
        self.lock = threading.Lock()  # one request at a time on the connection
        self.sock = self._connect()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _connect(self) -> socket.socket:
        deadline, reason = time.monotonic() + self.timeout, ""
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=max(1.0, self.timeout))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(None)
                return sock
            except OSError as e:
                reason = e.strerror or str(e)
            if time.monotonic() >= deadline:
                raise DistNetworkError(
                    f"glassgrad.distributed: could not reach the store at {self.address} within {self.timeout:g} s "
                    f"({reason}); rank 0 serves it: is rank 0 running, and do all ranks have the same MASTER_ADDR "
                    "and MASTER_PORT?"
                )
            time.sleep(0.05)

    def _request(self, op: int, key: str, value: bytes = b"", timeout: float | None = None) -> bytes:
        timeout = self.timeout if timeout is None else timeout
        encoded = key.encode()
        with self.lock:
            try:
                self.sock.sendall(REQUEST.pack(op, len(encoded), len(value), timeout) + encoded + value)
                status, size = REPLY.unpack(_recv_exact(self.sock, REPLY.size))
                payload = _recv_exact(self.sock, size)
            except OSError as e:
                raise DistNetworkError(f"glassgrad.distributed: lost the store at {self.address} ({e}); did rank 0 "
                                       "exit or fail?") from None  # fmt: skip
        if status == TIMED_OUT:
            raise DistStoreError(f"glassgrad.distributed: timed out after {timeout:g} s waiting for key {key!r} in "
                                 f"the store at {self.address}")  # fmt: skip
        if status != OK:
            raise DistError(f"glassgrad.distributed: the store at {self.address}: {payload.decode()}")
        return payload

    def set(self, key: str, value: bytes | str) -> None:
        """Store `value` under `key` (waking the ranks waiting for it)."""
        self._request(SET, key, value.encode() if isinstance(value, str) else bytes(value))

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value of `key`, waiting up to `timeout` seconds (the store's timeout) for some rank to set it."""
        return self._request(GET, key, timeout=timeout)

    def add(self, key: str, amount: int) -> int:
        """Add `amount` to the counter `key` (0 where unset) and return the new value."""
        return int(self._request(ADD, key, str(amount).encode()))

    def check(self, key: str) -> bool:
        """Whether `key` is set, without waiting."""
        return self._request(CHECK, key) == b"1"

    def delete_prefix(self, prefix: str) -> None:
        """Forget every key that starts with `prefix`."""
        self._request(DELETE_PREFIX, prefix)

    def close(self) -> None:
        """Close the connection, and stop the server where this client started it."""
        self.sock.close()
        if self.server is not None:
            self.server.close()
            self.server = None


def _is_loopback(host: str) -> bool:
    try:
        return socket.gethostbyname(host).startswith("127.")
    except OSError:
        return False
