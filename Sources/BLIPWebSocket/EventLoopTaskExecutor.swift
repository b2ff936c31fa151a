internal import BLIP
internal import NIOCore

/// Runs tasks on one NIO event loop: the task-executor preference that keeps a connection's callers and
/// handlers on the thread its frames are read and written on.
///
/// A task that prefers it starts on that loop, and resumes there when a reply arrives (the loop resumes
/// the continuation and runs the task in the same turn), instead of on a thread of the global pool that
/// must be woken, and that then wakes the loop again to write.
final class EventLoopTaskExecutor: TaskExecutor, EventLoopBound {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        self.eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
