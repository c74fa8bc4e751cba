/*
 * fake_torch_npu.cpp: a stand-in libtorch_npu.so for the part of torch_npu an
 * allocator must go through: its host-side task queue, the queue's consumer
 * thread, the thread that releases launched tasks' parameters, the one
 * exported entry that empties the queue, c10_npu::npuSynchronizeDevice(bool),
 * and the exported classes that record an event through it, c10_npu::NPUEvent
 * and c10_npu::NPUStream (the same C++ names, so the plug-in finds them as it
 * finds the real ones). Linked to the fake AscendCL runtime
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
 *   - One consumer thread, named "acl_thread" (NPUAffinityController.cpp
 *     SetThreadType, prctl(PR_SET_NAME)). Here it runs when the queue is
 *     emptied (a drain, or fake_tnpu_run_consumer: the real one runs all the
 *     time, whose timing a test cannot control) and stops when the queue is
 *     empty. While it drains it may run Python (an operator's compile) whose
 *     garbage collection frees tensors, or allocate workspaces
 *     (TASK_QUEUE_ENABLE=2), through the allocator (fake_tnpu_set_consumer_work,
 *     done at the next run).
 *   - The release thread, "release_thread" (NPUQueue.cpp StartRelease): the
 *     consumer hands every launched task's parameters to it through a bounded
 *     release queue (ReleaseQueue, kReleaseQueueCapacity 8192; here
 *     fake_tnpu_set("release_capacity", n), default 8), spinning while it is full
 *     (PushToReleaseQueue, NPUQueue.cpp v26.1.0:843-871); the release thread
 *     destroys them (OpParamMaker.cpp v26.1.0:614-617), which drops tensors'
 *     last references: the allocator's free runs there
 *     (fake_tnpu_launch_releasing). A wait for the queue from that thread waits
 *     for a consumer that waits for it: a hang.
 *   - npuSynchronizeDevice (NPUStream.cpp v26.1.0:692-719): empties the queue
 *     (the consumer launches what it holds), then aclrtSynchronizeDevice on the
 *     calling thread's current device. It may throw even with check_error false
 *     (CHECK_AND_THROW_ERROR_WITH_SPECIFIC_MESSAGE): mode "throw". A drain that
 *     does not finish within two seconds is recorded as a deadlock
 *     (fake_tnpu_deadlocks) and the wait given up, so the test can report it.
 *   - NPUEvent (NPUEvent.cpp v26.1.0): created lazily at its first record,
 *     record(stream) queues the record (LaunchRecordEventTask), query() is
 *     false while the record waits in the queue (NPUEventManager::
 *     IsEventRecorded), then the runtime's status. NPUStream holds one
 *     c10::Stream; stream(false) gives its aclrtStream without emptying the
 *     queue. Here a stream's id is its aclrtStream (0: the default stream).
 *
 * Not modelled: per-stream queues (PER_STREAM_QUEUE, 7.3.0+), a full task queue
 * making the framework's own launches wait, external streams, IPC events, the
 * timeout variant aclrtSynchronizeDeviceWithTimeout.
 */
#include <sys/prctl.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#define API __attribute__((visibility("default")))

extern "C" {
/* The fake runtime's side (tests/fakes/fake_acl.c). */
int aclrtSynchronizeDevice(void);
int aclrtGetDevice(int *device);
int aclrtSetDevice(int device);
int aclrtResetDevice(int device);
int aclrtCreateEvent(void **ev);
int aclrtRecordEvent(void *ev, void *stream);
int aclrtQueryEventStatus(void *ev, int *status);
int aclrtDestroyEvent(void *ev);
int fake_acl_launch(void *stream, void *ptr, size_t size);
void fake_acl_set_host_busy(int (*busy)(uintptr_t, uintptr_t, int, void *, int));

API void fake_tnpu_launch(void *stream, void *ptr, size_t size);
API void fake_tnpu_launch_releasing(void *stream, void *ptr, size_t size, void (*release)(void *), void *arg);
API int fake_tnpu_run_consumer(void);
API int fake_tnpu_release_idle(void);
API long fake_tnpu_queued(void);
API long fake_tnpu_drains(void);
API long fake_tnpu_deadlocks(void);
API long fake_tnpu_records(void);
API void fake_tnpu_set(const char *key, long value);
API void fake_tnpu_set_consumer_work(void (*work)(void *), void *arg);
API void fake_tnpu_reset(void);
}

namespace
{

struct task {
    int device;
    void *stream;
    void *ptr; /* a kernel's memory, or (event) the runtime's event to record */
    size_t size;
    bool event;
    void (*release)(void *); /* the parameters' release: runs on the release thread once launched */
    void *arg;
};

/* Never destroyed: the release thread waits on `changed` to the process's end, and destroying a condition variable
 * with a waiter blocks the exit. */
std::mutex &mu = *new std::mutex;
std::condition_variable &changed = *new std::condition_variable; /* the queue, the consumer, the release queue */
std::deque<task> queue;                                          /* launched by the framework, not yet on the device */
std::set<void *> unrecorded;                                     /* events whose record still waits in the queue */
bool consumer_running;
std::deque<task> releases; /* launched tasks' parameters, for the release thread */
size_t release_capacity = 8;
bool release_busy, release_started;
long drains, deadlocks, records;
bool throws;                   /* the next npuSynchronizeDevice throws (a device fault) */
void (*consumer_work)(void *); /* what the consumer does while it drains (once per run) */
void *consumer_arg;

constexpr auto kHang = std::chrono::seconds(2);

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
        if (t.event || p + t.size <= lo || hi <= p)
            continue;
        if (use_except && t.stream == except && (except || t.device == device))
            continue;
        return 1;
    }
    return 0;
}

void release_thread()
{
    prctl(PR_SET_NAME, "release_thread", 0, 0, 0);
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
        changed.wait(lk, [] { return !releases.empty(); });
        task t = releases.front();
        releases.pop_front();
        release_busy = true;
        changed.notify_all();
        lk.unlock();
        t.release(t.arg); /* a tensor's last reference: the allocator's free */
        lk.lock();
        release_busy = false;
        changed.notify_all();
    }
}

/* The consumer: its own work first (a garbage collection's frees, a workspace), then every queued task on the
 * device, each under its device, its parameters then handed to the release thread (waiting while that is full). */
void consume(void (*work)(void *), void *arg)
{
    prctl(PR_SET_NAME, "acl_thread", 0, 0, 0);
    if (work)
        work(arg);
    std::unique_lock<std::mutex> lk(mu);
    while (!queue.empty()) {
        task t = queue.front();
        lk.unlock();
        aclrtSetDevice(t.device);
        if (t.event)
            aclrtRecordEvent(t.ptr, t.stream);
        else
            fake_acl_launch(t.stream, t.ptr, t.size);
        aclrtResetDevice(t.device);
        lk.lock();
        if (t.event)
            unrecorded.erase(t.ptr);
        if (t.release) {
            if (!release_started) {
                release_started = true;
                std::thread(release_thread).detach();
            }
            changed.wait(lk, [] { return releases.size() < release_capacity; });
            releases.push_back(t);
            changed.notify_all();
        }
        queue.pop_front();
    }
    consumer_running = false;
    changed.notify_all();
}

/* Starts the consumer unless it runs, and waits until the queue is empty: false after two seconds. */
bool empty_queue(std::unique_lock<std::mutex> &lk)
{
    if (!consumer_running && (!queue.empty() || consumer_work)) {
        consumer_running = true;
        void (*work)(void *) = consumer_work; /* once: a garbage collection does not run at every drain */
        void *arg = consumer_arg;
        consumer_work = nullptr;
        std::thread(consume, work, arg).detach(); /* it finishes once what it waits for is released */
    }
    return changed.wait_for(lk, kHang, [] { return queue.empty() && !consumer_running; });
}

struct registrar {
    registrar() { fake_acl_set_host_busy(host_busy); }
} registered;

struct stream_parts { /* c10::Stream: Device{DeviceType int8, DeviceIndex int8}, StreamId int64 */
    int8_t type, index;
    int64_t id;
};

} // namespace

namespace c10_npu
{

class API NPUStream
{
  public:
    void *stream(bool need_empty) const;
    int8_t device_index() const { return stream_.index; }

  private:
    stream_parts stream_;
};

/* NPUStream.cpp v26.1.0:838-846: without need_empty, the stream's handle at once. */
void *NPUStream::stream(bool need_empty) const
{
    if (need_empty && queue_enabled()) {
        std::unique_lock<std::mutex> lk(mu);
        empty_queue(lk);
    }
    return reinterpret_cast<void *>(static_cast<uintptr_t>(stream_.id));
}

struct API NPUEvent {
    NPUEvent();
    ~NPUEvent();
    bool query() const;
    void record(const NPUStream &stream);

  private:
    unsigned int flags_;
    bool is_created_ = false;
    bool was_recorded_ = false;
    int8_t device_index_ = -1;
    void *event_ = nullptr;
    bool is_waited_ = false;
};

NPUEvent::NPUEvent() : flags_(0) {}

NPUEvent::~NPUEvent()
{
    if (is_created_) {
        std::lock_guard<std::mutex> g(mu);
        unrecorded.erase(event_);
        aclrtDestroyEvent(event_);
    }
}

bool NPUEvent::query() const
{
    if (!is_created_)
        return true;
    {
        std::lock_guard<std::mutex> g(mu);
        if (unrecorded.count(event_))
            return false;
    }
    int status = 0;
    if (aclrtQueryEventStatus(event_, &status) != 0)
        throw std::runtime_error("fake torch_npu: AclQueryEventRecordedStatus failed");
    return status == 1; /* ACL_EVENT_RECORDED_STATUS_COMPLETE */
}

void NPUEvent::record(const NPUStream &stream)
{
    int device = stream.device_index();
    if (!is_created_) {
        if (aclrtCreateEvent(&event_) != 0)
            throw std::runtime_error("fake torch_npu: aclrtCreateEvent failed");
        is_created_ = true;
        device_index_ = static_cast<int8_t>(device);
    }
    if (device_index_ != device)
        throw std::runtime_error("fake torch_npu: Event device does not match recording stream's device");
    void *s = stream.stream(false);
    std::lock_guard<std::mutex> g(mu);
    records++;
    if (!queue_enabled()) {
        aclrtRecordEvent(event_, s);
    } else {
        unrecorded.insert(event_);
        queue.push_back(task{device, s, event_, 0, true, nullptr, nullptr});
    }
    was_recorded_ = true;
}

#ifndef FAKE_TNPU_NO_SYNC /* built without it too: a torch_npu whose entry the plug-in cannot find */
/* NPUStream.cpp: empty every task queue, then wait for the current device. */
API bool npuSynchronizeDevice(bool check_error)
{
    (void)check_error;
    {
        std::unique_lock<std::mutex> lk(mu);
        drains++;
        if (throws) {
            throws = false;
            throw std::runtime_error("fake torch_npu: the device reported a fault during synchronization");
        }
        if (queue_enabled() && !empty_queue(lk)) {
            deadlocks++;
            return false;
        }
    }
    return aclrtSynchronizeDevice() == 0;
}
#endif

} // namespace c10_npu

/* An operator called by the framework: its launch waits in the task queue (or runs at once without the queue). */
API void fake_tnpu_launch(void *stream, void *ptr, size_t size)
{
    fake_tnpu_launch_releasing(stream, ptr, size, nullptr, nullptr);
}

/* The same, its parameters holding a tensor whose last reference release(arg) drops, on the release thread. */
API void fake_tnpu_launch_releasing(void *stream, void *ptr, size_t size, void (*release)(void *), void *arg)
{
    int device = 0;
    aclrtGetDevice(&device);
    if (!queue_enabled()) {
        fake_acl_launch(stream, ptr, size);
        if (release)
            release(arg);
        return;
    }
    std::lock_guard<std::mutex> g(mu);
    queue.push_back(task{device, stream, ptr, size, false, release, arg});
}

/* The consumer launches what the queue holds, as it does in the background: 1 when the queue emptied, 0 when it
 * did not within two seconds. */
API int fake_tnpu_run_consumer(void)
{
    std::unique_lock<std::mutex> lk(mu);
    return empty_queue(lk) ? 1 : 0;
}

/* Waits until the release thread has released everything handed to it: 1, or 0 after two seconds. */
API int fake_tnpu_release_idle(void)
{
    std::unique_lock<std::mutex> lk(mu);
    return changed.wait_for(lk, kHang, [] { return releases.empty() && !release_busy; }) ? 1 : 0;
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

/* Events recorded through the queue (NPUEvent::record). */
API long fake_tnpu_records(void)
{
    std::lock_guard<std::mutex> g(mu);
    return records;
}

API void fake_tnpu_set(const char *key, long value)
{
    std::lock_guard<std::mutex> g(mu);
    if (!std::strcmp(key, "throw"))
        throws = value != 0;
    else if (!std::strcmp(key, "release_capacity") && value > 0)
        release_capacity = static_cast<size_t>(value);
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
    unrecorded.clear();
    drains = deadlocks = records = 0;
    throws = false;
    consumer_work = nullptr;
    consumer_arg = nullptr;
}
