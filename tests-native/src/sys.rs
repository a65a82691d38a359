//! The one place the native tests need `unsafe`: the ext4 shutdown ioctl that simulates
//! power loss, ending one thread, and mapping a file (rustix has no safe wrapper for
//! them).
#![allow(unsafe_code)]

use std::os::fd::AsFd;

/// `EXT4_IOC_SHUTDOWN`, `_IOR('X', 125, __u32)`.
const EXT4_IOC_SHUTDOWN: rustix::ioctl::Opcode = rustix::ioctl::opcode::read::<u32>(b'X', 125);
/// Shut down without flushing the journal: what was not fsynced is lost, as at power loss.
pub const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 0x2;

/// Cuts "power" to the ext4 file system holding `fd`.
pub fn ext4_shutdown(fd: impl AsFd, flags: u32) -> std::io::Result<()> {
    // SAFETY: EXT4_IOC_SHUTDOWN reads one u32 from the pointer that `Setter` passes, which
    // points at `flags` for the duration of the call; the ioctl has no other memory effect.
    unsafe {
        rustix::ioctl::ioctl(
            fd,
            rustix::ioctl::Setter::<EXT4_IOC_SHUTDOWN, u32>::new(flags),
        )?;
    }
    Ok(())
}

/// Ends only the calling thread (`exit(2)`, not `exit_group`): a thread-group leader that
/// calls it becomes a zombie while its other threads live on.
pub fn exit_this_thread_only() -> ! {
    // SAFETY: SYS_exit terminates the calling thread and never returns; no Rust destructor
    // of this thread runs, which is the point (the helper's main thread owns nothing).
    unsafe {
        libc::syscall(libc::SYS_exit, 0);
    }
    unreachable!("SYS_exit returned")
}

/// Maps `len` bytes of `fd` read-only and shared, for the life of the process (never
/// unmapped): a process that maps a file without executing it.
pub fn map_readonly(fd: impl AsFd, len: usize) -> std::io::Result<()> {
    // SAFETY: a new read-only mapping at an address the kernel chooses (null hint) aliases
    // no Rust object; it is never read through or unmapped by this process.
    unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len.max(1),
            rustix::mm::ProtFlags::READ,
            rustix::mm::MapFlags::SHARED,
            fd,
            0,
        )?;
    }
    Ok(())
}

/// The descriptor `fd` this process inherited (socket activation's 3, 4, …), owned from
/// here on. The caller names only numbers `LISTEN_FDS` says it was given.
pub fn inherited(fd: i32) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd as _;
    // SAFETY: the caller passes a number that LISTEN_FDS (checked against LISTEN_PID)
    // says was inherited open for this process; nothing else owns it.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

/// Forks; true in the child. Only for the helper's single-threaded process chains (a child
/// of a multi-threaded process may call only async-signal-safe functions).
pub fn fork_is_child() -> bool {
    // SAFETY: the helper calls it single-threaded, before any thread is spawned.
    let r = unsafe { nix::unistd::fork() }.expect("fork");
    matches!(r, nix::unistd::ForkResult::Child)
}

/// Ends the process at once (`_exit(2)`: no atexit handlers, no stdio flush), as a forked
/// parent that hands on to its child does.
pub fn exit_now() -> ! {
    // SAFETY: _exit is async-signal-safe and never returns.
    unsafe { libc::_exit(0) }
}

/// Waits for the child `pid` to end (`wait4(2)`): its wait status and the peak resident
/// set the kernel counted for it (`ru_maxrss`, KiB). std's `Child` has no such wait.
pub fn wait_with_peak(pid: u32) -> (i32, u64) {
    let pid = i32::try_from(pid).expect("a pid");
    let mut status = 0;
    // SAFETY: rusage is plain old data, valid when zeroed; wait4 writes only into `status`
    // and `usage`, both live for the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `pid` is a child of this process not yet waited for.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    (status, u64::try_from(usage.ru_maxrss).unwrap_or(0))
}

/// Sends signal number `sig` to `pid`: any number, the real-time ones too (rustix names only
/// the standard signals without `unsafe`).
pub fn send_signal_number(pid: u32, sig: i32) -> std::io::Result<()> {
    // SAFETY: kill(2) takes two integers and touches no memory of this process.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
