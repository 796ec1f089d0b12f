"""A dataset tool server's template process: imports the MCP SDK once, then forks one fresh server per episode.

Runs inside the dataset sandbox (datasets/thinkingbox/server-template.ts starts it with the server's own
interpreter, environment and working directory). Lines on stdin ask for a server; each child then:

1. connects twice to the host's socket (its MCP stream, then its stderr), each time sending its token;
2. waits for the host's ``go`` (sent once the host has moved it into a cgroup of its own);
3. enters new user, mount, pid, network, ipc and uts namespaces and mounts a fresh tmpfs over the scratch folder
   and /tmp (nothing an earlier episode wrote is there); it is made not dumpable;
4. drops every capability (bounding set, securebits, no_new_privs) and runs the server's ``-m module`` or script
   in this already-initialised interpreter, with its stdin/stdout on the first connection.

Right after the fork a child re-seeds what the template's random generators hold (the random module, every
``random.Random`` a preloaded module seeded from entropy, numpy's global one): no two episodes draw the same numbers.
In its own user namespace it sets RLIMIT_NPROC to the sandbox's process limit, which then counts its own processes
only (the template itself is started without one: the limit counts per user namespace and uid, and every server of
the template has the template's uid), besides the cgroup of its own the host moves it into.

The template itself never reads a request's data before the fork and holds no episode state: a child starts
from the same pages as every other.
Usage: server_template.py SOCKET SCRATCH SCRATCH_BYTES PORTS [PROCESSES] -- SERVER_ARGV...
PORTS: the loopback ports the sandbox forwards (comma-separated, or -): each child binds them in its own network
namespace and relays them, as loopback_forward.py does, to the sockets the worker serves at SCRATCH.net/PORT.sock.
PROCESSES: each child's RLIMIT_NPROC (the sandbox's process limit), 0 or absent for none.
"""

from __future__ import annotations

import ctypes
import fcntl
import importlib
import json
import os
import random
import re
import resource
import runpy
import signal
import socket
import struct
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from loopback_forward import serve_forward

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_SECUREBITS = 1, 4, 24, 28
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
# SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_KEEP_CAPS_LOCKED: an exec as uid 0 gains no capability.
SECUREBITS = 0x01 | 0x02 | 0x20
# What the servers of a ThinkingBox dataset import first (most of a cold start); absent ones are skipped.
PRELOAD = ("mcp.server.fastmcp", "mcp.server.stdio", "mcp.server.lowlevel", "mcp.types", "pydantic", "anyio")

libc = ctypes.CDLL(None, use_errno=True)
# Generators a preloaded module seeded from entropy (`random.Random()`): each child seeds them afresh.
ENTROPY_SEEDED: weakref.WeakSet[random.Random] = weakref.WeakSet()


def track_entropy_seeded() -> Callable[[], None]:
    """Records every random.Random seeded from entropy (seed None) while the template preloads; returns the undo.
    One seeded with a value keeps its state in the children, as a cold start would give it the same."""
    original = random.Random.seed

    def seed(self: random.Random, a: Any = None, *args: Any, **kwargs: Any) -> None:
        (ENTROPY_SEEDED.add if a is None else ENTROPY_SEEDED.discard)(self)
        original(self, a, *args, **kwargs)

    random.Random.seed = seed  # type: ignore[method-assign]
    return lambda: setattr(random.Random, "seed", original)


def reseed_random() -> None:
    """In a child right after the fork: the random state it copied from the template is drawn afresh from
    os.urandom (the string hash seed cannot change after the interpreter started: it is the template's)."""
    random.seed()
    for generator in list(ENTROPY_SEEDED):
        generator.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None and hasattr(numpy_random, "seed"):
        numpy_random.seed()  # its global legacy RandomState, from the OS's entropy


def limit_processes(processes: int) -> None:
    """RLIMIT_NPROC in the child's own user namespace: counts the processes and threads of this server alone, as
    a cold start's fresh uid has it (a limit is only ever lowered here)."""
    if processes <= 0:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    value = processes if hard == resource.RLIM_INFINITY else min(processes, hard)
    resource.setrlimit(resource.RLIMIT_NPROC, (value, value))


def check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def write_file(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


def drop_capabilities() -> None:
    check(libc.prctl(PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0), "securebits")
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            check(-1, f"drop capability {cap}")
    check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2 words: all zero
    check(libc.capset(header, data), "capset")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    with open("/proc/self/status", encoding="ascii") as f:
        held = [line for line in f if line.startswith(("CapEff:", "CapPrm:", "CapBnd:")) and line.split()[1].strip("0")]
    if held:
        raise OSError(f"capabilities still held: {held}")


def enter_own_namespaces(scratch: str, scratch_bytes: int) -> None:
    """As bubblewrap does for a cold start: fresh namespaces, a fresh scratch folder and /tmp."""
    uid, gid = os.getuid(), os.getgid()
    check(
        libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS),
        "unshare",
    )
    write_file("/proc/self/setgroups", "deny")
    write_file("/proc/self/uid_map", f"0 {uid} 1")
    write_file("/proc/self/gid_map", f"0 {gid} 1")
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    for folder in ("/tmp", scratch):  # /tmp first: the scratch folder may lie below it
        fresh_tmpfs(folder, scratch_bytes)
    os.mkdir(os.path.join(scratch, "tmp"), 0o1777)
    os.chmod(os.path.join(scratch, "tmp"), 0o1777)


def mounts_below(folder: str) -> list[tuple[str, bool]]:
    """The outermost mount points strictly inside `folder` (path, read-only), in mount order."""
    found: list[tuple[str, bool]] = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point.startswith(folder.rstrip("/") + "/"):
                found = [(p, ro) for p, ro in found if not p.startswith(point.rstrip("/") + "/")]
                if not any(point.startswith(p.rstrip("/") + "/") for p, _ in found):
                    found.append((point, "ro" in fields[5].split(",")))
    return found


def fresh_tmpfs(folder: str, size: int) -> None:
    """An empty tmpfs over `folder`, with what bubblewrap had mounted inside it (a dataset, the worker's sockets
    or the scratch folder below /tmp) bound again at the same places: each is opened before it is covered and
    bound back from its open descriptor."""
    inside = [(point, ro, os.path.isdir(point), os.open(point, os.O_PATH)) for point, ro in mounts_below(folder)]
    options = f"size={size},mode=1777".encode()
    check(libc.mount(b"tmpfs", folder.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options), f"tmpfs {folder}")
    made: list[str] = []
    for point, ro, is_dir, fd in inside:
        target = point if is_dir else os.path.dirname(point)
        missing = target
        while not os.path.exists(missing):
            made.append(missing)
            missing = os.path.dirname(missing)
        os.makedirs(target, 0o755, exist_ok=True)
        if not is_dir:
            open(point, "a").close()  # an empty file to bind onto
        source = f"/proc/self/fd/{fd}".encode()
        check(libc.mount(source, point.encode(), None, MS_BIND | MS_REC, None), f"bind {point} again")
        os.close(fd)
        if ro and not os.statvfs(point).f_flag & os.ST_RDONLY:
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
            check(libc.mount(None, point.encode(), None, flags, None), f"read-only {point}")
    # Read-only, as bubblewrap makes them: the server (their owner here, but with no capability) cannot write
    # into the folders that lead to a bound path.
    for d in made:
        if not os.path.ismount(d):
            os.chmod(d, 0o555)


def bring_loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, request))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 1))  # SIOCSIFFLAGS, IFF_UP


def bind_forwards(scratch: str, ports: list[int]) -> list[tuple[socket.socket, str]]:
    if not ports:
        return []
    bring_loopback_up()
    listeners = []
    for port in ports:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
        listeners.append((listener, f"{scratch}.net/{port}.sock"))
    return listeners


def connect(path: str, token: str, role: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(f"{token} {role}\n".encode())
    return s


def wait_for_go(s: socket.socket) -> None:
    got = b""
    while got != b"go\n":  # byte by byte: what follows is the server's MCP stream
        b = s.recv(1)
        if not b or not b"go\n".startswith(got + b):
            os._exit(70)
        got += b


def wait_and_exit(pid: int) -> None:
    """Waits for the server and exits with its status."""
    _, status = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def run_server(argv: list[str]) -> None:
    """The server's own argv, run in this interpreter: `python -m module ...`, `python script ...` or a script."""
    if len(argv) >= 3 and argv[1] == "-m":
        sys.argv = [argv[2], *argv[3:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        return
    script = argv[1] if len(argv) >= 2 and not argv[1].startswith("-") else argv[0]
    sys.argv = [script, *argv[argv.index(script) + 1 :]]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def child(
    sock_path: str, token: str, scratch: str, scratch_bytes: int, ports: list[int], processes: int, argv: list[str]
) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        reseed_random()
        stream = connect(sock_path, token, "io")
        errors = connect(sock_path, token, "err")
        wait_for_go(stream)
        enter_own_namespaces(scratch, scratch_bytes)
        limit_processes(processes)  # counted in the new user namespace: this server's processes only
        forwards = bind_forwards(scratch, ports)  # bound before the server starts: its first connect succeeds
        server = os.fork()  # the first process in the new pid namespace; when it dies, all of that namespace does
        if server:
            check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "not dumpable")
            drop_capabilities()
            wait_and_exit(server)
        # (Its parent is outside this pid namespace, so getppid() says 0; should the parent die before this line,
        # the host's removal of the episode's cgroup still kills it.)
        check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
        # No /proc of its own (bubblewrap's /proc has read-only mounts over parts of it, so the kernel refuses a new
        # one): /proc lists the template's other servers, but each is in a user namespace of its own, so their
        # memory, environment and fds are closed to this one (ptrace access needs the same user namespace or a
        # capability in theirs); not dumpable besides.
        check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "not dumpable")
        drop_capabilities()
        # A process that called unshare(CLONE_NEWPID) cannot start threads: the relay runs here, as pid 1 of the
        # new namespace, and the server in a child of it.
        server = os.fork() if forwards else 0
        if server:
            for listener, path in forwards:
                threading.Thread(target=serve_forward, args=(listener, path), daemon=True).start()
            wait_and_exit(server)
        for listener, _ in forwards:
            listener.close()
    except BaseException as e:  # noqa: BLE001 - told to the host on the template's stdout, still fd 1 here
        os.write(1, f"failed {token} {type(e).__name__}: {e}".replace("\n", " ")[:400].encode() + b"\n")
        os._exit(70)
    os.dup2(stream.fileno(), 0)
    os.dup2(stream.fileno(), 1)
    os.dup2(errors.fileno(), 2)
    stream.close()
    errors.close()
    os.closerange(3, 65536)
    code = 0
    try:
        run_server(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported on stderr as the interpreter would
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:  # noqa: BLE001 - the host may have closed the stream
                pass
    os._exit(code)


def server_dependencies(argv: list[str]) -> list[str]:
    """The modules a `-m` server imports from outside its own package: a throwaway interpreter imports the
    server module (not as __main__, so it does not serve) and lists them. Preloading them makes a fork cost what
    the server's own modules cost; its own package is left to each fork, so no state of it is shared."""
    if len(argv) < 3 or argv[1] != "-m":
        return []
    own = argv[2].split(".")[0]
    code = "import importlib,json,sys; importlib.import_module(sys.argv[1]); print(json.dumps(sorted(sys.modules)))"
    try:
        found = subprocess.run(
            [sys.executable, "-c", code, argv[2]],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        names = json.loads(found.stdout.strip().splitlines()[-1]) if found.returncode == 0 else []
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return []
    return [n for n in names if n.split(".")[0] not in (own, "__main__")]


def main() -> None:
    sock_path, scratch, scratch_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ports = [int(p) for p in sys.argv[4].split(",") if p.strip() and p != "-"]
    processes = int(sys.argv[5]) if sys.argv.index("--") > 5 else 0
    argv = sys.argv[sys.argv.index("--") + 1 :]
    untrack = track_entropy_seeded()
    for name in (*PRELOAD, *server_dependencies(argv)):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not preloaded: the forked server imports it itself
            continue
    untrack()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked servers are reaped by the kernel
    os.write(1, f"ready {os.getpid()}\n".encode())
    pending = b""
    while True:
        chunk = os.read(0, 4096)  # never sys.stdin: its buffer would be copied into every child
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            token = line.decode().strip()
            try:
                pid = os.fork()
            except OSError as e:  # out of processes or memory: this server is refused, the template carries on
                os.write(1, f"failed {token} fork: {e}".replace("\n", " ")[:400].encode() + b"\n")
                continue
            if pid == 0:
                try:
                    child(sock_path, token, scratch, scratch_bytes, ports, processes, argv)
                finally:
                    os._exit(70)
            os.write(1, f"forked {token} {pid}\n".encode())


if __name__ == "__main__":
    main()
