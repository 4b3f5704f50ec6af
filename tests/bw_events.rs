//! bw -e's wait for completion events, on an end whose completions come later from another
//! thread, as a NIC's do (rxe and model0 mostly complete a WQE within the post call, so there a
//! thread seldom has to wait): the thread arms its CQ, polls once more, blocks on the channel
//! and takes the event; every message is counted, the waits are counted, and a device that never
//! completes is a stall at its deadline, not a hang.

use rdmaprobe::backend::{Backend, BackendError, BackendKind, MemView, OpKind, Polled};
use rdmaprobe::scenario::bw::{drive_ends, BwParams, Grid, Role};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The completions a "device" thread delivers, and whether the CQ is armed.
#[derive(Default)]
struct Cq {
    done: AtomicU32,
    armed: Mutex<bool>,
}

/// An end whose signalled sends complete `delay` after their post, from another thread; an
/// armed CQ raises an event (a byte on a socket) for the next completion.
struct LateEnd {
    cq: Arc<Cq>,
    /// The channel: the device writes to `raise`, the end waits on `chan`.
    chan: UnixStream,
    raise: Arc<Mutex<UnixStream>>,
    delay: Option<Duration>,
    buf: Vec<u8>,
    mem: MemView,
}

impl LateEnd {
    fn new(delay: Option<Duration>) -> Self {
        let (chan, raise) = UnixStream::pair().unwrap();
        chan.set_nonblocking(true).unwrap();
        let mut buf = vec![0u8; 8192];
        // SAFETY: the view points into `buf`, which the end owns and never reallocates.
        let mem = unsafe { MemView::new(buf.as_mut_ptr(), buf.len()) };
        LateEnd {
            cq: Arc::default(),
            chan,
            raise: Arc::new(Mutex::new(raise)),
            delay,
            buf,
            mem,
        }
    }
}

impl Backend for LateEnd {
    fn kind(&self) -> BackendKind {
        BackendKind::Verbs
    }
    fn qpn(&self) -> u32 {
        0 // a stand-in end: no QP behind it
    }
    fn post(&mut self, _op: OpKind, _len: u32, _n: u32, _inline: bool, signal_last: bool) -> Result<(), BackendError> {
        let Some(delay) = self.delay.filter(|_| signal_last) else {
            return Ok(());
        };
        let (cq, raise) = (self.cq.clone(), self.raise.clone());
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            cq.done.fetch_add(1, Ordering::SeqCst);
            let mut armed = cq.armed.lock().unwrap();
            if *armed {
                *armed = false;
                raise.lock().unwrap().write_all(&[1]).unwrap();
            }
        });
        Ok(())
    }
    fn post_recv(&mut self, _len: u32, _n: u32) -> Result<(), BackendError> {
        Ok(())
    }
    fn poll(&mut self) -> Result<Polled, BackendError> {
        Ok(Polled {
            sends: self.cq.done.swap(0, Ordering::SeqCst),
            recvs: 0,
            recv_len: 0,
            recv_ts: None,
        })
    }
    fn mem(&self) -> &MemView {
        let _ = &self.buf;
        &self.mem
    }
    fn max_inline(&self) -> u32 {
        0
    }
    fn rx_offset(&self) -> usize {
        4096
    }
    fn has_events(&self) -> bool {
        true
    }
    fn event_fd(&self) -> Option<i32> {
        Some(self.chan.as_raw_fd())
    }
    fn arm(&mut self) -> Result<(), BackendError> {
        *self.cq.armed.lock().unwrap() = true;
        Ok(())
    }
    fn wait_event(&mut self, _timeout: Duration) -> Result<bool, BackendError> {
        let mut b = [0u8; 16];
        Ok(matches!(self.chan.read(&mut b), Ok(n) if n > 0))
    }
}

fn params(iters: u64, stall: Duration) -> BwParams {
    BwParams {
        op: OpKind::Write,
        size: 64,
        iters,
        tx_depth: 4,
        rx_depth: None,
        postlist: 1,
        cq_mod: 1,
        inline: false,
        bidirectional: false,
        stall,
        window: Duration::from_millis(1),
        min_duration: Duration::ZERO,
        no_peak: true,
        unreliable: false,
    }
}

const SENDER: Role = Role {
    sends: true,
    receives: false,
};

#[test]
fn a_thread_with_nothing_to_do_blocks_for_the_event_and_counts_every_message() {
    let mut end = LateEnd::new(Some(Duration::from_millis(20)));
    let grid = Grid::new(2_000_000);
    let stop = AtomicBool::new(false);
    let r = drive_ends(
        &mut [(&mut end, SENDER)],
        &params(40, Duration::from_secs(10)),
        &grid,
        false,
        &stop,
    )
    .unwrap();
    assert_eq!(r.messages, 40);
    // four outstanding, each completing 20 ms later: the thread is idle between batches and
    // waits for their events (a wait can be skipped only by a turn that came 20 ms late)
    let waits = r
        .event_waits
        .expect("an end with a completion channel counts its waits");
    assert!(waits >= 1, "no wait for an event in ten 20 ms gaps");
    assert!(waits <= 40, "more waits ({waits}) than completions");
}

#[test]
fn a_device_that_never_completes_is_a_stall_at_its_deadline() {
    let mut end = LateEnd::new(None);
    let grid = Grid::new(2_000_000);
    let stop = AtomicBool::new(false);
    let t = std::time::Instant::now();
    let e = drive_ends(
        &mut [(&mut end, SENDER)],
        &params(10, Duration::from_millis(300)),
        &grid,
        false,
        &stop,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("no progress") || e.contains("stall"), "{e}");
    // the waits are slices: the deadline is kept within a slice or two, whatever the noise
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}
