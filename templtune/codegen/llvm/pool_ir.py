"""The LLVM IR of templtune's thread pool (see :mod:`templtune.codegen.llvm.pool`): its state
as globals of the module, the launch kernels call, the workers' loop, and the moves of a worker
off its caller's CPU. x86-64 Linux: raw ``syscall`` numbers, ``pause``.
"""

from __future__ import annotations

__all__ = ["LAUNCH", "pool_ir"]

#: the symbol kernels call: ``void (ptr fn, ptr ctx, i32 nthreads)``
LAUNCH = "templtune_parallel_launch"
_MAX_CPUS = 1024
_CLOSED = -(1 << 31)  # bit 31 of the state word: the job takes no more workers
# Linux x86-64 syscall numbers and futex operations (private to the process)
_SYS_FUTEX, _SYS_SCHED_YIELD, _SYS_SETAFFINITY, _SYS_GETAFFINITY, _SYS_GETCPU = \
    202, 24, 203, 204, 309
_FUTEX_WAIT, _FUTEX_WAKE = 128, 129
_DRAIN_SPINS = 2000  # pauses before a draining caller yields its CPU to a joined worker

_STATE = ("busy", "gen", "state", "limit", "workers", "sleepers")


def _mask_bit(mask: str, cpu: str) -> str:
    """IR lines setting ``%wp`` to the i64 word of affinity mask ``mask`` that holds CPU
    ``cpu`` (an i32) and ``%one`` to that CPU's bit in it."""
    return (f"  %word = lshr i32 {cpu}, 6\n"
            f"  %bit = and i32 {cpu}, 63\n"
            "  %bit64 = zext i32 %bit to i64\n"
            "  %one = shl i64 1, %bit64\n"
            f"  %wp = getelementptr inbounds [{_MAX_CPUS // 64} x i64], ptr {mask}, i32 0, "
            "i32 %word\n")


def pool_ir(spin: int) -> str:
    """The pool's module, its workers spinning ``spin`` pauses before they sleep."""
    g = [f"@tt_pool.{n} = internal global i32 {_CLOSED if n == 'state' else 0}, align 64"
         for n in _STATE]
    g += ["@tt_pool.fn = internal global ptr null, align 64",
          "@tt_pool.ctx = internal global ptr null, align 8",
          f"@tt_pool.spin = internal global i32 {int(spin)}, align 64",
          "@tt_pool.ncpus = internal global i32 0, align 4",
          "@tt_pool.caller_cpu = internal global i32 -1, align 4",
          "@tt_pool.born = internal global i32 0, align 4",
          f"@tt_pool.cpus = internal global [{_MAX_CPUS} x i32] zeroinitializer, align 4"]
    return "\n".join(g) + f"""
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i64 @syscall(i64, ...)
declare void @llvm.x86.sse2.pause()
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

define void @templtune_pool_configure(i32 %spin, ptr %cpus, i32 %n) {{
entry:
  store i32 %spin, ptr @tt_pool.spin
  %big = icmp sgt i32 %n, {_MAX_CPUS}
  %m = select i1 %big, i32 {_MAX_CPUS}, i32 %n
  %bytes = zext i32 %m to i64
  %len = shl i64 %bytes, 2
  call void @llvm.memcpy.p0.p0.i64(ptr @tt_pool.cpus, ptr %cpus, i64 %len, i1 false)
  store i32 %m, ptr @tt_pool.ncpus
  ret void
}}
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

define void @templtune_pool_reset() {{
entry:
  store i32 0, ptr @tt_pool.busy
  store i32 0, ptr @tt_pool.workers
  store i32 0, ptr @tt_pool.sleepers
  store i32 {_CLOSED}, ptr @tt_pool.state
  ret void
}}

define internal void @tt_pool.pin(i32 %k) {{
entry:
  %n = load i32, ptr @tt_pool.ncpus
  %none = icmp slt i32 %n, 2
  br i1 %none, label %done, label %pin
pin:
  %k1 = add i32 %k, 1
  %slot = urem i32 %k1, %n
  %p = getelementptr inbounds [{_MAX_CPUS} x i32], ptr @tt_pool.cpus, i32 0, i32 %slot
  %cpu = load i32, ptr %p
  %mask = alloca [{_MAX_CPUS // 64} x i64], align 8
  call void @llvm.memset.p0.i64(ptr %mask, i8 0, i64 {_MAX_CPUS // 8}, i1 false)
{_mask_bit("%mask", "%cpu")}  store i64 %one, ptr %wp
  %r = call i64 (i64, ...) @syscall(i64 {_SYS_SETAFFINITY}, i64 0, i64 {_MAX_CPUS // 8}, ptr %mask)
  br label %done
done:
  ret void
}}

; A worker can share the caller's CPU: it starts there, and one woken from its futex is often
; queued there (a guest scheduler takes the idle vCPU for a preempted one); the load balancer
; can leave such a pair for seconds. A worker joining a job, or woken, on the caller's
; CPU leaves it: affinity without that CPU moves the thread at once, and the old affinity, set
; back, does not move it again.
define internal void @tt_pool.unstack() {{
entry:
  %n = load i32, ptr @tt_pool.ncpus
  %pinned = icmp sgt i32 %n, 1
  br i1 %pinned, label %done, label %where
where:
  %mine = alloca i32, align 4
  %c = call i64 (i64, ...) @syscall(i64 {_SYS_GETCPU}, ptr %mine, ptr null, ptr null)
  %me = load i32, ptr %mine
  %caller = load atomic i32, ptr @tt_pool.caller_cpu acquire, align 4
  %same = icmp eq i32 %me, %caller
  %known = icmp sge i32 %caller, 0
  %both = and i1 %same, %known
  br i1 %both, label %move, label %done
move:
  %old = alloca [{_MAX_CPUS // 64} x i64], align 8
  %new = alloca [{_MAX_CPUS // 64} x i64], align 8
  call void @llvm.memset.p0.i64(ptr %old, i8 0, i64 {_MAX_CPUS // 8}, i1 false)
  %got = call i64 (i64, ...) @syscall(i64 {_SYS_GETAFFINITY}, i64 0, i64 {_MAX_CPUS // 8}, ptr %old)
  %ok = icmp sgt i64 %got, 0
  br i1 %ok, label %clear, label %done
clear:
  call void @llvm.memcpy.p0.p0.i64(ptr %new, ptr %old, i64 {_MAX_CPUS // 8}, i1 false)
{_mask_bit("%new", "%me")}  %keep = xor i64 %one, -1
  %w = load i64, ptr %wp
  %w1 = and i64 %w, %keep
  store i64 %w1, ptr %wp
  %r1 = call i64 (i64, ...) @syscall(i64 {_SYS_SETAFFINITY}, i64 0, i64 {_MAX_CPUS // 8}, ptr %new)
  %moved = icmp eq i64 %r1, 0
  br i1 %moved, label %restore, label %done
restore:
  %r2 = call i64 (i64, ...) @syscall(i64 {_SYS_SETAFFINITY}, i64 0, i64 {_MAX_CPUS // 8}, ptr %old)
  br label %done
done:
  ret void
}}

define internal ptr @tt_pool.worker(ptr %arg) {{
entry:
  %lastp = alloca i32, align 4
  %ip = alloca i32, align 4
  %k64 = ptrtoint ptr %arg to i64
  %k = trunc i64 %k64 to i32
  call void @tt_pool.pin(i32 %k)
  ; the generation before the launch that made this worker, so that it joins that launch
  %g0 = load atomic i32, ptr @tt_pool.born acquire, align 4
  store i32 %g0, ptr %lastp
  br label %wait
wait:
  store i32 0, ptr %ip
  br label %spin
spin:
  %g = load atomic i32, ptr @tt_pool.gen acquire, align 4
  %last = load i32, ptr %lastp
  %new = icmp ne i32 %g, %last
  br i1 %new, label %got, label %more
more:
  %i = load i32, ptr %ip
  %lim = load i32, ptr @tt_pool.spin
  %go = icmp slt i32 %i, %lim
  br i1 %go, label %pause, label %sleep
pause:
  call void @llvm.x86.sse2.pause()
  %i1 = add i32 %i, 1
  store i32 %i1, ptr %ip
  br label %spin
sleep:
  ; seq_cst on both sides (here and in the launch) so that a launch either sees this sleeper
  ; or this worker sees its generation; the futex re-checks the word atomically
  %s0 = atomicrmw add ptr @tt_pool.sleepers, i32 1 seq_cst
  %g2 = load atomic i32, ptr @tt_pool.gen seq_cst, align 4
  %same = icmp eq i32 %g2, %last
  br i1 %same, label %futex, label %woke
futex:
  %r = call i64 (i64, ...) @syscall(i64 {_SYS_FUTEX}, ptr @tt_pool.gen, i32 {_FUTEX_WAIT}, i32 %last, ptr null)
  call void @tt_pool.unstack()
  br label %woke
woke:
  %s1 = atomicrmw sub ptr @tt_pool.sleepers, i32 1 seq_cst
  br label %wait
got:
  store i32 %g, ptr %lastp
  br label %join
join:
  %st = load atomic i32, ptr @tt_pool.state acquire, align 4
  %closed = icmp slt i32 %st, 0
  br i1 %closed, label %wait, label %room
room:
  %cap = load atomic i32, ptr @tt_pool.limit monotonic, align 4
  %full = icmp sge i32 %st, %cap
  br i1 %full, label %wait, label %cas
cas:
  %st1 = add i32 %st, 1
  %pair = cmpxchg ptr @tt_pool.state, i32 %st, i32 %st1 acq_rel acquire
  %ok = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %ok, label %run, label %join
run:
  call void @tt_pool.unstack()
  %fn = load atomic ptr, ptr @tt_pool.fn monotonic, align 8
  %ctx = load atomic ptr, ptr @tt_pool.ctx monotonic, align 8
  call void %fn(ptr %ctx)
  %x = atomicrmw sub ptr @tt_pool.state, i32 1 release
  br label %wait
}}

define internal void @tt_pool.grow(i32 %need) {{
entry:
  %tid = alloca i64, align 8
  %g = load atomic i32, ptr @tt_pool.gen monotonic, align 4
  store atomic i32 %g, ptr @tt_pool.born release, align 4
  br label %check
check:
  %w = load i32, ptr @tt_pool.workers
  %enough = icmp sge i32 %w, %need
  br i1 %enough, label %done, label %make
make:
  %w64 = zext i32 %w to i64
  %arg = inttoptr i64 %w64 to ptr
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @tt_pool.worker, ptr %arg)
  %fail = icmp ne i32 %rc, 0
  br i1 %fail, label %done, label %made
made:
  %t = load i64, ptr %tid
  %d = call i32 @pthread_detach(i64 %t)
  %w1 = add i32 %w, 1
  store i32 %w1, ptr @tt_pool.workers
  br label %check
done:
  ret void
}}

define void @{LAUNCH}(ptr %fn, ptr %ctx, i32 %nth) {{
entry:
  %one = icmp sle i32 %nth, 1
  br i1 %one, label %alone, label %lock
alone:
  call void %fn(ptr %ctx)
  ret void
lock:
  %p = cmpxchg ptr @tt_pool.busy, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %p, 1
  br i1 %got, label %grow, label %alone
grow:
  %need = sub i32 %nth, 1
  call void @tt_pool.grow(i32 %need)
  %w = load i32, ptr @tt_pool.workers
  %few = icmp slt i32 %w, %need
  %cap = select i1 %few, i32 %w, i32 %need
  %nobody = icmp eq i32 %cap, 0
  br i1 %nobody, label %unlock_alone, label %publish
unlock_alone:
  store atomic i32 0, ptr @tt_pool.busy release, align 4
  br label %alone
publish:
  ; where this caller runs, for joining workers to leave that CPU (tt_pool.unstack)
  %cpup = alloca i32, align 4
  %gc = call i64 (i64, ...) @syscall(i64 {_SYS_GETCPU}, ptr %cpup, ptr null, ptr null)
  %cpu = load i32, ptr %cpup
  store atomic i32 %cpu, ptr @tt_pool.caller_cpu monotonic, align 4
  store atomic ptr %fn, ptr @tt_pool.fn monotonic, align 8
  store atomic ptr %ctx, ptr @tt_pool.ctx monotonic, align 8
  store atomic i32 %cap, ptr @tt_pool.limit monotonic, align 4
  store atomic i32 0, ptr @tt_pool.state release, align 4
  %g = atomicrmw add ptr @tt_pool.gen, i32 1 seq_cst
  %sl = load atomic i32, ptr @tt_pool.sleepers seq_cst, align 4
  %any = icmp sgt i32 %sl, 0
  br i1 %any, label %wake, label %work
wake:
  ; wake the sleepers and give this CPU to one of them for a moment in case it was queued
  ; here (it then moves away: tt_pool.unstack)
  %r = call i64 (i64, ...) @syscall(i64 {_SYS_FUTEX}, ptr @tt_pool.gen, i32 {_FUTEX_WAKE}, i32 2147483647)
  %y0 = call i64 (i64, ...) @syscall(i64 {_SYS_SCHED_YIELD})
  br label %work
work:
  call void %fn(ptr %ctx)
  %old = atomicrmw or ptr @tt_pool.state, i32 {_CLOSED} acq_rel
  br label %drain
drain:
  %i = phi i32 [ 0, %work ], [ %i1, %pause ], [ 0, %yield ]
  %s = load atomic i32, ptr @tt_pool.state acquire, align 4
  %cnt = and i32 %s, 2147483647
  %done = icmp eq i32 %cnt, 0
  br i1 %done, label %finish, label %waiting
waiting:
  %i1 = add i32 %i, 1
  %long = icmp sgt i32 %i1, {_DRAIN_SPINS}
  br i1 %long, label %yield, label %pause
pause:
  call void @llvm.x86.sse2.pause()
  br label %drain
yield:
  ; a joined worker may wait for this very CPU (queued behind the caller)
  %y = call i64 (i64, ...) @syscall(i64 {_SYS_SCHED_YIELD})
  br label %drain
finish:
  store atomic i32 0, ptr @tt_pool.busy release, align 4
  ret void
}}
"""
