//! The client and the worker against an in-memory path (a request region in a vector, a
//! receive queue per client that drops what comes with no receive posted, as UD does): every
//! request answered and checked, HERD's draws and slots, the window, the signalling, the
//! doorbell batches, and the errors a wrong response or a wrong request must give.

use super::*;
use std::cell::RefCell;
use std::rc::Rc;

/// A client's receive side: receives posted, responses waiting, datagrams dropped.
#[derive(Default)]
struct Inbox {
    recvs: u32,
    queue: VecDeque<Response>,
    dropped: u64,
}

type Shared<T> = Rc<RefCell<T>>;

struct MemClient {
    region: Shared<Vec<u8>>,
    inbox: Shared<Inbox>,
    signalled: u32,
    writes: Vec<(usize, Vec<u8>, bool)>,
    /// Flips this byte of the next GET hit's value (a forged response).
    forge: Option<usize>,
    /// Completions of signalled writes held back (a path slower than the posts).
    hold: bool,
}

impl MemClient {
    /// A client's path to a region of its own (no worker).
    fn alone(sh: Shape) -> MemClient {
        MemClient {
            region: Rc::new(RefCell::new(vec![0u8; sh.layout.bytes()])),
            inbox: Rc::default(),
            signalled: 0,
            writes: Vec::new(),
            forge: None,
            hold: false,
        }
    }
}

impl ClientLink for MemClient {
    fn write(&mut self, slot: usize, bytes: &[u8], signal: bool) -> Result<(), BackendError> {
        self.region.borrow_mut()[slot * SLOT..slot * SLOT + bytes.len()].copy_from_slice(bytes);
        self.signalled += u32::from(signal);
        self.writes.push((slot, bytes.to_vec(), signal));
        Ok(())
    }
    fn post_recvs(&mut self, n: u32) -> Result<(), BackendError> {
        self.inbox.borrow_mut().recvs += n;
        Ok(())
    }
    fn poll_sends(&mut self) -> Result<u32, BackendError> {
        Ok(if self.hold {
            0
        } else {
            std::mem::take(&mut self.signalled)
        })
    }
    fn poll_responses(&mut self, out: &mut Vec<Response>) -> Result<(), BackendError> {
        let mut b = self.inbox.borrow_mut();
        for _ in 0..16 {
            let Some(mut r) = b.queue.pop_front() else { break };
            if let (Some(at), true) = (self.forge, r.len > 0) {
                r.data[at] ^= 0x40;
                self.forge = None;
            }
            out.push(r);
        }
        Ok(())
    }
}

struct MemWorker {
    region: Shared<Vec<u8>>,
    inboxes: Vec<Shared<Inbox>>,
    signalled: u32,
    posts: Vec<usize>,
    hold: bool,
}

impl WorkerLink for MemWorker {
    fn read_slot(&self, slot: usize, out: &mut [u8; SLOT]) {
        out.copy_from_slice(&self.region.borrow()[slot * SLOT..(slot + 1) * SLOT]);
    }
    fn opcode(&self, slot: usize) -> u8 {
        self.region.borrow()[slot * SLOT + op::OPCODE_AT]
    }
    fn set_opcode(&self, slot: usize, v: u8) {
        self.region.borrow_mut()[slot * SLOT + op::OPCODE_AT] = v;
    }
    fn respond(&mut self, batch: &[Reply<'_>]) -> Result<(), BackendError> {
        for r in batch {
            let mut b = self.inboxes[r.to as usize].borrow_mut();
            self.signalled += u32::from(r.signal);
            if b.recvs == 0 {
                b.dropped += 1;
                continue;
            }
            b.recvs -= 1;
            let mut data = [0u8; SLOT];
            data[..r.data.len()].copy_from_slice(r.data);
            b.queue.push_back(Response {
                imm: r.imm,
                len: r.data.len() as u32,
                data,
            });
        }
        self.posts.push(batch.len());
        Ok(())
    }
    fn poll_sends(&mut self) -> Result<u32, BackendError> {
        Ok(if self.hold {
            0
        } else {
            std::mem::take(&mut self.signalled)
        })
    }
}

struct Run {
    clients: Vec<(Client, MemClient)>,
    workers: Vec<(Worker, MemWorker)>,
}

fn shape(workers: u32, clients: u32, window: u32, keys: u32, update_pct: u32) -> Shape {
    Shape {
        layout: Layout {
            workers,
            clients,
            window,
        },
        keys,
        update_pct,
        val_len: 32,
        dist: keys::KeyDist::Uniform,
    }
}

fn setup(sh: Shape, postlist: u32, total: u64) -> Run {
    let l = sh.layout;
    let region = Rc::new(RefCell::new(vec![0u8; l.bytes()]));
    let inboxes: Vec<Shared<Inbox>> = (0..l.clients).map(|_| Rc::default()).collect();
    let clients = (0..l.clients)
        .map(|c| {
            let link = MemClient {
                region: region.clone(),
                inbox: inboxes[c as usize].clone(),
                signalled: 0,
                writes: Vec::new(),
                forge: None,
                hold: false,
            };
            (Client::new(c, sh, total), link)
        })
        .collect();
    let workers = (0..l.workers)
        .map(|w| {
            let link = MemWorker {
                region: region.clone(),
                inboxes: inboxes.clone(),
                signalled: 0,
                posts: Vec::new(),
                hold: false,
            };
            (Worker::new(w, sh, sh.store().unwrap(), postlist), link)
        })
        .collect();
    Run { clients, workers }
}

/// Steps every client and worker in turn until every client is done (or an error); the most
/// requests a client had outstanding.
fn run(r: &mut Run) -> Result<u64, KvError> {
    for (c, l) in &mut r.clients {
        c.start(l)?;
    }
    let mut most = 0;
    for _ in 0..10_000_000u64 {
        let mut done = 0;
        for (c, l) in &mut r.clients {
            done += usize::from(c.step(l)? == Step::Done);
            most = most.max(c.outstanding);
        }
        if done == r.clients.len() {
            return Ok(most);
        }
        for (w, l) in &mut r.workers {
            w.step(l)?;
        }
    }
    panic!("the run did not end");
}

#[test]
fn every_request_is_answered_and_every_get_checked() {
    for update in [0, 50] {
        let mut r = setup(shape(3, 4, 8, 2000, update), 4, 1000);
        let most = run(&mut r).unwrap();
        assert!(most <= 8, "{most} outstanding: the window is 8");
        let mut sum = ClientStats::default();
        for (c, l) in &r.clients {
            let s = c.stats();
            assert_eq!((s.issued, s.answered), (1000, 1000));
            assert_eq!(s.get_hits + s.get_misses + s.puts, 1000);
            assert_eq!(c.latency().len(), 1000);
            assert_eq!(l.inbox.borrow().dropped, 0, "a response came with no receive posted");
            // signalled 1 in 64: requests 0, 64, .. 960
            assert_eq!(l.writes.iter().filter(|w| w.2).count(), 16);
            sum.get_hits += s.get_hits;
            sum.get_misses += s.get_misses;
            sum.puts += s.puts;
        }
        let (mut served, mut hits, mut misses) = (0, 0, 0);
        for (w, l) in &r.workers {
            let s = w.stats();
            served += s.requests;
            hits += s.store.get_hits;
            misses += s.store.get_misses;
            assert_eq!(l.posts.len() as u64, s.batches);
            assert!(
                l.posts.iter().all(|&n| (1..=4).contains(&n)),
                "a batch above the postlist"
            );
        }
        assert_eq!((served, hits, misses), (4000, sum.get_hits, sum.get_misses));
        if update == 0 {
            assert_eq!((sum.puts, sum.get_misses), (0, 0));
        } else {
            // 50 % of 4000 draws: far from both ends
            assert!((1700..2300).contains(&sum.puts), "{} PUTs", sum.puts);
        }
    }
}

#[test]
fn a_worker_batches_what_several_clients_wrote() {
    let mut r = setup(shape(1, 8, 16, 500, 0), 8, 256);
    run(&mut r).unwrap();
    let (w, l) = &r.workers[0];
    let s = w.stats();
    assert_eq!(s.requests, 8 * 256);
    assert!(l.posts.contains(&8), "never a full postlist: {:?}", &l.posts[..20]);
    assert!(
        s.batches < s.requests / 2,
        "{} batches for {} requests",
        s.batches,
        s.requests
    );
}

#[test]
fn client_0_writes_rdma_bench_s_first_requests() {
    // as rdma_bench's client 0 with 12 workers, 50 % updates and 8M keys (keys.rs has the values)
    let sh = shape(12, 1, 32, 8 << 20, 50);
    let mut c = Client::new(0, sh, 3);
    let mut l = MemClient::alone(sh);
    c.start(&mut l).unwrap();
    for _ in 0..3 {
        assert_eq!(c.step(&mut l).unwrap(), Step::Progress);
    }
    let want = [(10, 6536826, false), (1, 5452036, true), (5, 4094839, false)];
    for (i, (wn, id, put)) in want.into_iter().enumerate() {
        let (slot, bytes, signal) = &l.writes[i];
        assert_eq!(*slot, sh.layout.slot(wn, 0, 0), "request {i}");
        assert_eq!(bytes[..16], keys::key(id), "request {i}");
        assert_eq!(
            bytes[op::OPCODE_AT],
            if put { op::HERD_OP_PUT } else { op::HERD_OP_GET }
        );
        assert_eq!(bytes.len(), if put { 50 } else { 17 });
        assert_eq!(*signal, i == 0);
    }
}

#[test]
fn a_forged_value_is_an_error_naming_the_key() {
    let mut r = setup(shape(2, 2, 4, 300, 0), 2, 200);
    r.clients[1].1.forge = Some(5);
    let e = run(&mut r).unwrap_err();
    match &e {
        KvError::Value {
            client: 1,
            source: op::ValueError::Byte { at: 5, key, .. },
            ..
        } => {
            assert!(e.to_string().contains(key.as_str()), "{e}");
        }
        e => panic!("not a value error of client 1: {e}"),
    }
}

#[test]
fn a_response_nobody_waits_for_is_an_error() {
    let sh = shape(2, 1, 4, 100, 0);
    let mut c = Client::new(0, sh, 10);
    let mut l = MemClient::alone(sh);
    c.start(&mut l).unwrap();
    c.step(&mut l).unwrap();
    let wn = (0..2).find(|&w| c.pending[w].is_empty()).unwrap() as u32;
    l.inbox.borrow_mut().queue.push_back(Response {
        imm: wn,
        len: 0,
        data: [0; SLOT],
    });
    let e = c.step(&mut l).unwrap_err();
    assert!(
        e.to_string().contains(&format!("from worker {wn} with no request")),
        "{e}"
    );
    l.inbox.borrow_mut().queue.push_back(Response {
        imm: 7,
        len: 0,
        data: [0; SLOT],
    });
    let e = c.step(&mut l).unwrap_err();
    assert!(e.to_string().contains("immediate 7 names no worker"), "{e}");
}

#[test]
fn a_put_with_a_wrong_value_is_refused_where_it_lands() {
    let mut r = setup(shape(1, 1, 4, 100, 0), 4, 10);
    let k = keys::key(3);
    let (mut s, n) = op::request(&k, Some(&[0x11; 32]));
    s[op::OPCODE_AT] = op::HERD_OP_PUT;
    r.clients[0].1.region.borrow_mut()[..n].copy_from_slice(&s[..n]);
    let (w, l) = &mut r.workers[0];
    let e = w.step(l).unwrap_err();
    assert!(matches!(e, KvError::Request { slot: 0, client: 0, .. }), "{e}");
    assert!(e.to_string().contains(&keys::hex(&k)), "{e}");
}

/// A worker's path whose PUT value's tail becomes visible only at the third read of its slot
/// (a WRITE whose bytes land in two stores, its writer descheduled between them).
struct Late<'a> {
    inner: &'a mut MemWorker,
    reads: std::cell::Cell<u32>,
    tail: Vec<u8>,
}

impl WorkerLink for Late<'_> {
    fn read_slot(&self, slot: usize, out: &mut [u8; SLOT]) {
        self.reads.set(self.reads.get() + 1);
        if self.reads.get() == 3 {
            let at = slot * SLOT + 32;
            self.inner.region.borrow_mut()[at..at + self.tail.len()].copy_from_slice(&self.tail);
        }
        self.inner.read_slot(slot, out)
    }
    fn opcode(&self, slot: usize) -> u8 {
        self.inner.opcode(slot)
    }
    fn set_opcode(&self, slot: usize, v: u8) {
        self.inner.set_opcode(slot, v)
    }
    fn respond(&mut self, batch: &[Reply<'_>]) -> Result<(), BackendError> {
        self.inner.respond(batch)
    }
    fn poll_sends(&mut self) -> Result<u32, BackendError> {
        self.inner.poll_sends()
    }
}

/// A PUT whose value's tail is seen late is read again until it holds, and counted; the store
/// takes the whole value. One whose value never holds is still an error (after TORN_WAIT).
#[test]
fn a_put_read_before_its_tail_landed_is_read_again_and_counted() {
    let mut r = setup(shape(1, 1, 4, 100, 0), 4, 10);
    let k = keys::key(3);
    let mut v = [0u8; 32];
    op::fill_value(&k, &mut v);
    let (mut s, n) = op::request(&k, Some(&v));
    s[op::OPCODE_AT] = op::HERD_OP_PUT;
    let tail = s[32..n].to_vec();
    s[32..n].fill(0);
    r.clients[0].1.region.borrow_mut()[..n].copy_from_slice(&s[..n]);
    let (w, l) = &mut r.workers[0];
    let mut late = Late {
        inner: l,
        reads: std::cell::Cell::new(0),
        tail,
    };
    assert_eq!(w.step(&mut late).unwrap(), Step::Progress);
    assert_eq!((w.stats().torn_reads, w.stats().requests), (1, 1));
    assert_eq!(w.stats().store.put_hits, 1, "{:?}", w.stats());
    // a tail that never lands
    let mut r = setup(shape(1, 1, 4, 100, 0), 4, 10);
    r.clients[0].1.region.borrow_mut()[..n].copy_from_slice(&s[..n]);
    let (w, l) = &mut r.workers[0];
    let t = std::time::Instant::now();
    let e = w.step(l).unwrap_err();
    assert!(t.elapsed() >= TORN_WAIT, "{:?}", t.elapsed());
    assert!(e.to_string().contains(&keys::hex(&k)), "{e}");
    assert_eq!(w.stats().torn_reads, 0);
}

#[test]
fn a_client_reaps_a_completion_before_each_64th_write() {
    // a window above 64 so only the reaping holds the client back
    let mut r = setup(shape(1, 1, 100, 500, 0), 4, 300);
    let (c, l) = &mut r.clients[0];
    c.start(l).unwrap();
    l.hold = true;
    for _ in 0..500 {
        c.step(l).unwrap();
    }
    // writes 0..62 went out (0 signalled); the 64th (index 63) waits for that completion
    assert_eq!(l.writes.len(), 63);
    assert_eq!(c.step(l).unwrap(), Step::Idle);
    l.hold = false;
    assert_eq!(c.step(l).unwrap(), Step::Progress);
    assert_eq!(l.writes.len(), 64);
    assert!(
        l.writes[0].2 && !l.writes[1..].iter().any(|w| w.2),
        "signalled: the first only"
    );
}

#[test]
fn a_worker_reaps_before_a_batch_that_may_reach_its_64th_response() {
    let mut r = setup(shape(1, 8, 16, 500, 0), 8, 1000);
    r.workers[0].1.hold = true;
    for (c, l) in &mut r.clients {
        c.start(l).unwrap();
        while c.step(l).unwrap() == Step::Progress {}
    }
    let (w, l) = &mut r.workers[0];
    for _ in 0..100 {
        w.step(l).unwrap();
    }
    // 8 clients' 16 requests each are there; batches of 8 go out until a batch could hold
    // response 63: after 56, the worker waits for the completion of response 0
    assert_eq!(w.stats().requests, 56);
    assert_eq!(w.step(l).unwrap(), Step::Idle);
    l.hold = false;
    assert_eq!(w.step(l).unwrap(), Step::Progress);
    assert_eq!(w.stats().requests, 64);
}
