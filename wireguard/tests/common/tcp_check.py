"""A TCP transfer checked for content, for wireguard/tests/tcp.rs.

    tcp_check.py server ADDR PORT        accept one connection, read to EOF, answer "<bytes> <blake2s>"
    tcp_check.py client ADDR PORT BYTES  send BYTES of a fixed pattern, expect the server's answer
                                         to match what was sent; exit 0 and print it if so
    tcp_check.py until ADDR PORT FILE    as client, sending the pattern again and again until FILE
                                         exists (a transfer that lasts as long as its caller needs)
"""
import hashlib
import socket
import sys
import time


def pattern(n):
    out, x = bytearray(), 0x9E3779B9
    block = bytearray(4096)
    while len(out) < n:
        for i in range(0, 4096, 4):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
            block[i:i + 4] = x.to_bytes(4, "little")
        out += block
    return bytes(out[:n])


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def server(addr, port):
    s = socket.socket(family(addr))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(1)
    c, _ = s.accept()
    h, n = hashlib.blake2s(), 0
    while True:
        b = c.recv(65536)
        if not b:
            break
        h.update(b)
        n += len(b)
    c.sendall(f"{n} {h.hexdigest()}\n".encode())
    c.close()


def client(addr, port, n):
    data = pattern(n)
    want = f"{n} {hashlib.blake2s(data).hexdigest()}"
    c = socket.create_connection((addr, port), timeout=30)
    start = time.monotonic()
    c.sendall(data)
    c.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = c.recv(4096)
        if not b:
            break
        got += b
    secs = time.monotonic() - start
    got = got.decode().strip()
    if got != want:
        print(f"content differs: sent {want}, server read {got}")
        sys.exit(1)
    print(f"{n} bytes in {secs:.2f} s, content checked ({got.split()[1][:16]}…)")


def until(addr, port, stop):
    import os
    block = pattern(1 << 20)
    h, n = hashlib.blake2s(), 0
    c = socket.create_connection((addr, port), timeout=30)
    start = time.monotonic()
    while not os.path.exists(stop):
        c.sendall(block)
        h.update(block)
        n += len(block)
    c.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        b = c.recv(4096)
        if not b:
            break
        got += b
    secs = time.monotonic() - start
    got, want = got.decode().strip(), f"{n} {h.hexdigest()}"
    if got != want:
        print(f"content differs: sent {want}, server read {got}")
        sys.exit(1)
    print(f"{n} bytes in {secs:.2f} s, content checked ({got.split()[1][:16]}…)")


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "until":
        until(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
