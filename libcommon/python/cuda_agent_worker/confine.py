"""The worker confines itself before it reads its first request (so no task code runs outside it),
after torch and the device are up (so the driver's start-up needs no allowance): the Landlock
ruleset and the seccomp filter its client prepared (libcommon/confine.cpp, passed as an inherited
descriptor and as hex), no capabilities, no core files, a bound on every file it writes. Each step
the kernel refuses is left out with a warning; the names of those applied go in the hello."""
import ctypes
import os
import platform
import resource
import threading

PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
LANDLOCK_RULE_PATH_BENEATH = 1
READ_FILE, READ_DIR = 1 << 2, 1 << 3
# The seccomp system call's number (landlock's are the same everywhere: 444-446).
SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 445, 446


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _err(what):
    e = ctypes.get_errno()
    return "%s: %s" % (what, os.strerror(e))


def _drop_capabilities(libc):
    """Root without capabilities: no mount, module, raw device or DAC override, and (with an empty
    bounding set) none regained by exec."""
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            return _err("prctl(PR_CAPBSET_DROP)")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    hdr = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(hdr), data) != 0:
        return _err("capset")
    return None


def lower_rlimit(which, limit, hard_too=False):
    """Set the soft limit of resource `which` (and the hard one too, hard_too: for good) to `limit`,
    never above the hard limit the process already has."""
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(which, (limit, limit if hard_too else hard))


def apply(landlock_fd=-1, seccomp_hex="", file_mb=0, skip=()):
    """Returns (applied, warnings). Must run while the main thread is the only Python thread: the
    Landlock domain is the calling thread's (every thread started later inherits it)."""
    applied, warnings = [], []
    libc = _libc()
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    if others:
        warnings.append("python threads started before the confinement: %s" % ", ".join(others))

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if file_mb > 0:
        lower_rlimit(resource.RLIMIT_FSIZE, file_mb << 20, hard_too=True)
    applied.append("rlimit")

    if "caps" not in skip:
        if _has_capabilities():
            why = _drop_capabilities(libc)
            if why:
                warnings.append("capabilities kept: " + why)
            else:
                applied.append("no-caps")
        else:
            applied.append("no-caps")

    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        warnings.append(_err("prctl(PR_SET_NO_NEW_PRIVS)") + "; no landlock, no seccomp")
        return applied, warnings

    if landlock_fd >= 0 and "landlock" not in skip:
        # Its own /proc entry: only this process can name it (the client's /proc/self is the client).
        for path in ("/proc/self",):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            rule = _PathBeneath(READ_FILE | READ_DIR, fd)
            if libc.syscall(SYS_LANDLOCK_ADD_RULE, landlock_fd, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                warnings.append(_err("landlock_add_rule(%s)" % path))
            os.close(fd)
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, landlock_fd, 0) != 0:
            warnings.append(_err("landlock_restrict_self") + ": task code can read and write every file the tool can")
        else:
            applied.append("landlock")
    elif landlock_fd < 0 and "landlock" not in skip:
        warnings.append("landlock: not prepared (see the client's warnings): the filesystem is not confined")
    if landlock_fd >= 0:
        os.close(landlock_fd)

    if seccomp_hex and "seccomp" not in skip:
        nr = SYS_SECCOMP.get(platform.machine())
        code = bytes.fromhex(seccomp_hex)
        buf = ctypes.create_string_buffer(code, len(code))
        prog = _SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
        if nr is None:
            warnings.append("seccomp: unknown system call number on %s" % platform.machine())
        elif libc.syscall(nr, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(prog)) != 0:
            warnings.append(_err("seccomp") + ": task code can open network sockets and leave the process group")
        else:
            applied.append("seccomp")
    elif not seccomp_hex:
        warnings.append("seccomp: no filter prepared: task code can open network sockets")
    return applied, warnings


def _has_capabilities():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:") or line.startswith("CapPrm:"):
                    if int(line.split()[1], 16) != 0:
                        return True
    except OSError:
        pass
    return False
