"""Loads a Docker seccomp profile (JSON) into this process the way Docker does, then runs a command under it.

Usage: python3 apply-seccomp-profile.py PROFILE CAPS -- COMMAND [ARGS...]
  CAPS: the container's capabilities, comma-separated (e.g. '' for cap_drop: [ALL]); rules that include or
  exclude capabilities are kept or left out by them, as Docker does when it builds a container's filter.

Stand-in for Docker on machines without an engine (test/worker-image.test.ts): libseccomp through ctypes, the
native architecture only. Standard library only.
"""

import ctypes
import json
import os
import platform
import sys

ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}
SCMP_ACT_ALLOW = 0x7FFF0000
OPS = {
    "SCMP_CMP_NE": 1,
    "SCMP_CMP_LT": 2,
    "SCMP_CMP_LE": 3,
    "SCMP_CMP_EQ": 4,
    "SCMP_CMP_GE": 5,
    "SCMP_CMP_GT": 6,
    "SCMP_CMP_MASKED_EQ": 7,
}


class ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


def kernel_at_least(version: str) -> bool:
    have = [int(x) for x in platform.release().split("-")[0].split(".")[:2]]
    return have >= [int(x) for x in version.split(".")[:2]]


def applies(rule: dict, arch: str, caps: set) -> bool:
    inc, exc = rule.get("includes", {}), rule.get("excludes", {})
    if inc.get("arches") and arch not in inc["arches"]:
        return False
    if exc.get("arches") and arch in exc["arches"]:
        return False
    if inc.get("caps") and not set(inc["caps"]) <= caps:
        return False
    if exc.get("caps") and set(exc["caps"]) & caps:
        return False
    if inc.get("minKernel") and not kernel_at_least(inc["minKernel"]):
        return False
    return True


def main() -> None:
    sep = sys.argv.index("--")
    profile_file, caps_text = sys.argv[1:sep]
    command = sys.argv[sep + 1 :]
    caps = {c for c in caps_text.split(",") if c}
    arch = ARCHES[platform.machine()]
    profile = json.load(open(profile_file))
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(ArgCmp),
    ]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO", profile["defaultAction"]
    ctx = lib.seccomp_init(errno_action(profile.get("defaultErrnoRet", 1)))
    for rule in profile["syscalls"]:
        if not applies(rule, arch, caps):
            continue
        if rule["action"] == "SCMP_ACT_ALLOW":
            action = SCMP_ACT_ALLOW
        elif rule["action"] == "SCMP_ACT_ERRNO":
            action = errno_action(rule.get("errnoRet", 1))
        else:
            sys.exit(f"{profile_file}: action {rule['action']} is not supported here")
        args = rule.get("args") or []
        # Conditions on one argument index are separate rules (libseccomp takes one condition per index).
        groups = [args] if len({a["index"] for a in args}) == len(args) else [[a] for a in args]
        for group in groups:
            cmps = (ArgCmp * max(len(group), 1))(
                *[ArgCmp(a["index"], OPS[a["op"]], a["value"], a.get("valueTwo", 0)) for a in group]
            )
            for name in rule["names"]:
                nr = lib.seccomp_syscall_resolve_name(name.encode())
                if nr < 0:
                    continue  # unknown to this libseccomp or architecture: Docker skips it too
                rc = lib.seccomp_rule_add_array(ctx, action, nr, len(group), cmps)
                if rc < 0 and rc != -17:  # -EEXIST: the same rule again
                    sys.exit(f"{profile_file}: seccomp_rule_add {name}: {os.strerror(-rc)}")
    rc = lib.seccomp_load(ctx)
    if rc < 0:
        sys.exit(f"seccomp_load: {os.strerror(-rc)}")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
