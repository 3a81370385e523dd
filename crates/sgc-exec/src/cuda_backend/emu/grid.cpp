// The emulated device's launch: every block of the grid, every thread of each block, on
// the calling OS thread. Blocks and threads run in descending order (a GPU promises no
// order, and a kernel that depends on one is wrong; the reverse of the obvious order
// makes such a dependence show).
//
// A kernel without `__syncthreads` runs each thread to its end in turn. A kernel with
// barriers runs its threads as fibers: each runs until it reaches a barrier or
// ends, then the next; when every thread has, the round repeats, until all have ended.
// A thread that ends leaves the barrier (as on sm_70 and later).

#include "cuda_host.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace sgc_emu_rt {
thread_local sgc_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
}

// Switching between fibers. glibc's `swapcontext` makes a system call per switch (it saves
// the signal mask), which made barrier kernels spend 95% of their time in the kernel; on
// x86-64 a switch is the six callee-saved registers and the stack pointer (the System V
// ABI), so it is done here in a few instructions. Elsewhere, ucontext.
#if defined(__x86_64__)
extern "C" void sgc_emu_switch(void** save_sp, void* to_sp);
asm(R"(
    .text
    .globl sgc_emu_switch
    .type sgc_emu_switch, @function
sgc_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size sgc_emu_switch, .-sgc_emu_switch
)");
#define SGC_EMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace {

constexpr size_t STACK_BYTES = 256 * 1024;

struct Fiber {
#ifdef SGC_EMU_ASM_SWITCH
    void* sp;
#else
    ucontext_t ctx;
#endif
    bool done;
};

struct Scheduler {
#ifdef SGC_EMU_ASM_SWITCH
    void* main_sp = nullptr;
#else
    ucontext_t main;
#endif
    std::vector<Fiber> fibers;
    std::vector<char> stacks;
    unsigned current = 0;
    bool fibered = false;
    bool misused = false;
    void (*body)(void**) = nullptr;
    void** params = nullptr;
};

thread_local Scheduler S;

// Runs the current fiber's thread to its end, then returns to the scheduler for good.
void fiber_main() {
    S.body(S.params);
    Fiber& f = S.fibers[S.current];
    f.done = true;
#ifdef SGC_EMU_ASM_SWITCH
    sgc_emu_switch(&f.sp, S.main_sp);
    std::abort();  // a finished fiber is never resumed
#endif
    // ucontext: returning resumes `S.main` (`uc_link`).
}

// From the scheduler into fiber `t`, until it reaches a barrier or ends.
bool resume(unsigned t) {
#ifdef SGC_EMU_ASM_SWITCH
    sgc_emu_switch(&S.main_sp, S.fibers[t].sp);
    return true;
#else
    return swapcontext(&S.main, &S.fibers[t].ctx) == 0;
#endif
}

// Fiber `t` set to start `fiber_main` on its own stack.
bool start(unsigned t) {
    Fiber& f = S.fibers[t];
    f.done = false;
    char* stack = S.stacks.data() + static_cast<size_t>(t) * STACK_BYTES;
#ifdef SGC_EMU_ASM_SWITCH
    // The stack as `sgc_emu_switch` leaves it: six saved registers (zero), then the
    // address it returns to (`fiber_main`), then a return address `fiber_main` never uses,
    // so that `fiber_main` starts with the stack aligned as after a call.
    auto top = reinterpret_cast<uintptr_t>(stack + STACK_BYTES) & ~uintptr_t(15);
    auto* slots = reinterpret_cast<void**>(top) - 8;
    for (int i = 0; i < 6; ++i) slots[i] = nullptr;
    slots[6] = reinterpret_cast<void*>(&fiber_main);
    slots[7] = nullptr;
    f.sp = slots;
    return true;
#else
    if (getcontext(&f.ctx) != 0) return false;
    f.ctx.uc_stack.ss_sp = stack;
    f.ctx.uc_stack.ss_size = STACK_BYTES;
    f.ctx.uc_link = &S.main;
    makecontext(&f.ctx, fiber_main, 0);
    return true;
#endif
}

void run_block_plain(unsigned threads) {
    for (unsigned t = threads; t-- > 0;) {
        sgc_emu_rt::threadIdx = {t, 0, 0};
        S.body(S.params);
    }
}

bool run_block_fibers(unsigned threads) {
    S.fibers.resize(threads);
    S.stacks.resize(static_cast<size_t>(threads) * STACK_BYTES);
    for (unsigned t = 0; t < threads; ++t) {
        if (!start(t)) return false;
    }
    for (;;) {
        bool live = false;
        for (unsigned t = threads; t-- > 0;) {
            if (S.fibers[t].done) continue;
            S.current = t;
            sgc_emu_rt::threadIdx = {t, 0, 0};
            if (!resume(t)) return false;
            live = live || !S.fibers[t].done;
        }
        if (!live) return true;
    }
}

}  // namespace

void sgc_emu_rt::syncthreads() {
    if (!S.fibered) {
        // A kernel the build did not see use shared memory reached a barrier.
        S.misused = true;
        return;
    }
    Fiber& f = S.fibers[S.current];
#ifdef SGC_EMU_ASM_SWITCH
    sgc_emu_switch(&f.sp, S.main_sp);
#else
    swapcontext(&f.ctx, &S.main);
#endif
}

// Runs `body(params)` for every thread of `blocks` blocks of `threads`; `barriers`: the
// kernel uses `__syncthreads`. 0 on success; 1 when a kernel reached a barrier it was not
// declared to use; 2 when a fiber could not be made.
extern "C" int sgc_emu_run_grid(void (*body)(void**), void** params, unsigned blocks,
                                unsigned threads, int barriers) {
    S.body = body;
    S.params = params;
    S.fibered = barriers != 0;
    S.misused = false;
    sgc_emu_rt::gridDim = {blocks, 1, 1};
    sgc_emu_rt::blockDim = {threads, 1, 1};
    for (unsigned b = blocks; b-- > 0;) {
        sgc_emu_rt::blockIdx = {b, 0, 0};
        if (S.fibered) {
            if (!run_block_fibers(threads)) return 2;
        } else {
            run_block_plain(threads);
        }
        if (S.misused) return 1;
    }
    return 0;
}
