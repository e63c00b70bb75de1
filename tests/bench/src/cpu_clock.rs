//! CPU time (user + system) of a process, all its threads, with nanosecond resolution.
//!
//! Another process: the sum of the first field of `/proc/<pid>/task/<tid>/schedstat` (each
//! thread's time on a CPU, the scheduler's own account, which the process CPU clock also reads).
//! The account of a thread that is on a CPU is brought up to date only when it leaves it, so read
//! it while the process waits (the probe holds its request a moment first). `/proc/<pid>/stat`
//! counts in 10 ms ticks, too coarse for an init of a few milliseconds. Threads that have exited
//! are no longer listed: the functions' threads (the runtime's and tokio's blocking pool, which
//! keeps an idle thread 10 s) outlive the windows measured here.
//!
//! This process: its CPU clock (`CLOCK_PROCESS_CPUTIME_ID`), current to the call.

use std::time::Duration;

/// CPU time used so far by the threads of process `pid` (`"self"` for this one), if it is alive.
fn of(pid: &str) -> Option<Duration> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut ns: u64 = 0;
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else { continue };
        if let Some(n) = text.split_whitespace().next().and_then(|f| f.parse::<u64>().ok()) {
            ns += n;
            any = true;
        }
    }
    any.then(|| Duration::from_nanos(ns))
}

/// CPU time used so far by process `pid` (all its threads), if it is alive.
pub fn of_process(pid: u32) -> Option<Duration> {
    of(&pid.to_string())
}

/// CPU time used so far by this process (all threads, living and exited).
pub fn own() -> Option<Duration> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Some(Duration::new(u64::try_from(t.tv_sec).ok()?, u32::try_from(t.tv_nsec).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_process_s_cpu_time_is_read_from_outside_and_grows_while_it_works() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; sleep 2"])
            .spawn()
            .expect("sh");
        std::thread::sleep(Duration::from_millis(50));
        let early = of_process(child.id()).expect("a live child's threads");
        std::thread::sleep(Duration::from_millis(300));
        let later = of_process(child.id()).expect("a live child's threads");
        let _ = child.kill();
        let _ = child.wait();
        assert!(later > early, "{early:?} → {later:?}");
        assert!(own().is_some_and(|t| t > Duration::ZERO));
    }
}
