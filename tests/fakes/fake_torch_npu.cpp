/*
 * fake_torch_npu.cpp: a stand-in libtorch_npu.so for the part of torch_npu an
 * allocator must go through: its host-side task queue and the one exported
 * entry that empties it, c10_npu::npuSynchronizeDevice(bool) (the same C++
 * name, so the plug-in finds it as it finds the real one:
 * _ZN7c10_npu20npuSynchronizeDeviceEb). Linked to the fake AscendCL runtime
 * (tests/fakes/fake_acl.c), as the real library is to libascendcl.so.
 *
 * Modelled from torch_npu (Ascend/pytorch; docs/CONTRACTS.md gives tags and lines):
 *   - TASK_QUEUE_ENABLE (OptionsManager.cpp GetTaskQueueEnable, default 1):
 *     operators are not launched on the device when the framework calls
 *     them; they wait in a host queue (fake_tnpu_launch) until its consumer
 *     thread launches them. Until then the device's streams do not hold them:
 *     an event recorded or a stream synchronized directly on the runtime does
 *     not cover them, and freeing their memory is a use-after-free when they
 *     launch (fake_acl's host-busy probe counts them as queued work).
 *   - npuSynchronizeDevice (NPUStream.cpp): empties every queue (the consumer
 *     launches what it holds), then aclrtSynchronizeDevice on the calling
 *     thread's current device. It may throw even with check_error false
 *     (CHECK_AND_THROW_ERROR_WITH_SPECIFIC_MESSAGE): mode "throw".
 *   - The consumer is another thread: while it drains it may run Python (an
 *     operator's compile) whose garbage collection frees tensors, or allocate
 *     workspaces (TASK_QUEUE_ENABLE=2), through the allocator
 *     (fake_tnpu_set_consumer_work, done at the next drain). torch_npu's own allocator releases its lock
 *     around the call for that reason (NPUCachingAllocator.cpp, UnlockGuard). A
 *     drain that does not finish within two seconds is recorded as a deadlock
 *     (fake_tnpu_deadlocks), and the wait given up so the test can report it.
 *
 * Not modelled: per-stream queues (PER_STREAM_QUEUE, 7.3.0+), the release
 * thread that destroys launched tasks' parameters, NPUEvent's own recording
 * through the queue (LaunchRecordEventTask is not exported), the timeout
 * variant aclrtSynchronizeDeviceWithTimeout.
 */
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>

#define API __attribute__((visibility("default")))

extern "C" {
/* The fake runtime's side (tests/fakes/fake_acl.c). */
int aclrtSynchronizeDevice(void);
int aclrtGetDevice(int *device);
int aclrtSetDevice(int device);
int aclrtResetDevice(int device);
int fake_acl_launch(void *stream, void *ptr, size_t size);
void fake_acl_set_host_busy(int (*busy)(uintptr_t, uintptr_t, int, void *, int));

API void fake_tnpu_launch(void *stream, void *ptr, size_t size);
API long fake_tnpu_queued(void);
API long fake_tnpu_drains(void);
API long fake_tnpu_deadlocks(void);
API void fake_tnpu_set(const char *key, long value);
API void fake_tnpu_set_consumer_work(void (*work)(void *), void *arg);
API void fake_tnpu_reset(void);
}

namespace
{

struct task {
    int device;
    void *stream;
    void *ptr;
    size_t size;
};

std::mutex mu;
std::deque<task> queue; /* launched by the framework, not yet on the device */
long drains, deadlocks;
bool throws;                   /* the next npuSynchronizeDevice throws (a device fault) */
void (*consumer_work)(void *); /* what the consumer does while it drains (once per drain) */
void *consumer_arg;

bool queue_enabled()
{
    const char *v = std::getenv("TASK_QUEUE_ENABLE");
    const char *blocking = std::getenv("ASCEND_LAUNCH_BLOCKING");
    if (blocking && std::strcmp(blocking, "1") == 0)
        return false;
    return !v || std::strtol(v, nullptr, 10) != 0;
}

/* fake_acl's probe: queued host work touching [lo, hi) counts as work the device will run. */
int host_busy(uintptr_t lo, uintptr_t hi, int device, void *except, int use_except)
{
    std::lock_guard<std::mutex> g(mu);
    for (const task &t : queue) {
        uintptr_t p = reinterpret_cast<uintptr_t>(t.ptr);
        if (p + t.size <= lo || hi <= p)
            continue;
        if (use_except && t.stream == except && (except || t.device == device))
            continue;
        return 1;
    }
    return 0;
}

/* The consumer thread: its own work first (a garbage collection's frees, a workspace), then every queued launch
 * on the device, each under its device. */
void consume(void (*work)(void *), void *arg)
{
    if (work)
        work(arg);
    for (;;) {
        task t;
        {
            std::lock_guard<std::mutex> g(mu);
            if (queue.empty())
                break;
            t = queue.front();
            queue.pop_front();
        }
        aclrtSetDevice(t.device);
        fake_acl_launch(t.stream, t.ptr, t.size);
        aclrtResetDevice(t.device);
    }
}

struct registrar {
    registrar() { fake_acl_set_host_busy(host_busy); }
} registered;

} // namespace

#ifndef FAKE_TNPU_NO_SYNC /* built without it too: a torch_npu whose entry the plug-in cannot find */
namespace c10_npu
{

/* NPUStream.cpp: empty every task queue, then wait for the current device. */
API bool npuSynchronizeDevice(bool check_error)
{
    (void)check_error;
    {
        std::lock_guard<std::mutex> g(mu);
        drains++;
        if (throws) {
            throws = false;
            throw std::runtime_error("fake torch_npu: the device reported a fault during synchronization");
        }
    }
    if (queue_enabled()) {
        struct shared {
            std::mutex m;
            std::condition_variable cv;
            bool done = false;
        };
        auto *s = new shared; /* kept alive by the consumer when the wait is given up */
        void (*work)(void *);
        void *arg;
        {
            std::lock_guard<std::mutex> g(mu);
            work = consumer_work; /* once: a garbage collection does not run at every drain */
            arg = consumer_arg;
            consumer_work = nullptr;
        }
        std::thread consumer([s, work, arg] {
            consume(work, arg);
            std::lock_guard<std::mutex> g(s->m);
            s->done = true;
            s->cv.notify_all();
        });
        std::unique_lock<std::mutex> lk(s->m);
        bool finished = s->cv.wait_for(lk, std::chrono::seconds(2), [s] { return s->done; });
        lk.unlock();
        if (finished) {
            consumer.join();
            delete s;
        } else {
            std::lock_guard<std::mutex> g(mu);
            deadlocks++;
            consumer.detach(); /* it finishes once the allocator's lock is released; s leaks, by design */
            return false;
        }
    }
    return aclrtSynchronizeDevice() == 0;
}

} // namespace c10_npu
#else
/* No entry: nothing drains the queue (the consumer is never started); launches stay queued. */
[[maybe_unused]] static void (*unused_consume)(void (*)(void *), void *) = consume;
#endif

/* An operator called by the framework: its launch waits in the task queue (or runs at once without the queue). */
API void fake_tnpu_launch(void *stream, void *ptr, size_t size)
{
    int device = 0;
    aclrtGetDevice(&device);
    if (!queue_enabled()) {
        fake_acl_launch(stream, ptr, size);
        return;
    }
    std::lock_guard<std::mutex> g(mu);
    queue.push_back(task{device, stream, ptr, size});
}

API long fake_tnpu_queued(void)
{
    std::lock_guard<std::mutex> g(mu);
    return static_cast<long>(queue.size());
}

API long fake_tnpu_drains(void)
{
    std::lock_guard<std::mutex> g(mu);
    return drains;
}

API long fake_tnpu_deadlocks(void)
{
    std::lock_guard<std::mutex> g(mu);
    return deadlocks;
}

API void fake_tnpu_set(const char *key, long value)
{
    std::lock_guard<std::mutex> g(mu);
    if (!std::strcmp(key, "throw"))
        throws = value != 0;
}

API void fake_tnpu_set_consumer_work(void (*work)(void *), void *arg)
{
    std::lock_guard<std::mutex> g(mu);
    consumer_work = work;
    consumer_arg = arg;
}

API void fake_tnpu_reset(void)
{
    std::lock_guard<std::mutex> g(mu);
    queue.clear();
    drains = deadlocks = 0;
    throws = false;
    consumer_work = nullptr;
    consumer_arg = nullptr;
}
