//! model0 across processes: a client and a server process connect through the model with the
//! same exchange as real hosts (QP number, rkey, address over a pipe), and objects left by a
//! process that died are swept away by the next one to open the model.
//!
//! Children are made with `fork`; the tests here take one mutex, so only one of them forks at a
//! time, and a child uses only the model and its pipes before `_exit`.

use rdmaprobe::mlx5::cq::{cqe_op, Cqe};
use rdmaprobe::mlx5::seg::DataSeg;
use rdmaprobe::mlx5::sq::DbMode;
use rdmaprobe::mlx5::wqe::{Payload, Wqe};
use rdmaprobe::model::{DirectModelQp, Model, ModelConfig, ModelConnect, ModelQpCaps};
use rdmaprobe::sys;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

const ALL: u32 = sys::IBV_ACCESS_LOCAL_WRITE
    | sys::IBV_ACCESS_REMOTE_WRITE
    | sys::IBV_ACCESS_REMOTE_READ
    | sys::IBV_ACCESS_REMOTE_ATOMIC;

fn pipe() -> (i32, i32) {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a writable array of two ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

fn send(fd: i32, v: &[u64; 3]) {
    let mut b = [0u8; 24];
    for (i, x) in v.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
    }
    // SAFETY: writes 24 bytes from a live buffer.
    assert_eq!(unsafe { libc::write(fd, b.as_ptr().cast(), 24) }, 24);
}

fn recv(fd: i32) -> Option<[u64; 3]> {
    let mut b = [0u8; 24];
    let mut got = 0usize;
    while got < 24 {
        // SAFETY: reads into the rest of a live buffer.
        let n = unsafe { libc::read(fd, b[got..].as_mut_ptr().cast(), 24 - got) };
        if n <= 0 {
            return None;
        }
        got += n as usize;
    }
    Some([0, 1, 2].map(|i| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap())))
}

fn wait_cqe(q: &mut DirectModelQp) -> Result<Cqe, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = [Cqe::default(); 1];
    loop {
        match q.cq.poll(&mut out) {
            Ok(1) => return Ok(out[0]),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
        if Instant::now() > deadline {
            return Err("no CQE within 10 s".into());
        }
    }
}

fn setup() -> (Model, DirectModelQp, rdmaprobe::model::ModelMr) {
    let model = Model::open(ModelConfig::default()).expect("model");
    let pd = model.alloc_pd();
    let q = DirectModelQp::new(&model, pd, ModelQpCaps::default(), 64, DbMode::Bf).expect("qp");
    let mr = model.reg_mr(pd, 1 << 16, ALL).expect("mr");
    (model, q, mr)
}

/// The server side, in the child: returns a failure description or None.
fn server(to_client: i32, from_client: i32) -> Option<String> {
    let (_m, mut q, mr) = setup();
    q.rq.post(&[DataSeg::new(mr.addr(), mr.lkey(), 4096)]).ok()?;
    q.rq.ring();
    send(to_client, &[q.qp.qpn() as u64, mr.rkey() as u64, mr.addr()]);
    let [cqpn, crkey, caddr] = recv(from_client)?;
    q.qp.connect(cqpn as u32, ModelConnect::default());
    send(to_client, &[1, 0, 0]); // connected
                                 // The client WRITEs 1000 bytes at offset 8192, then SENDs a 16-byte note.
    let c = match wait_cqe(&mut q) {
        Ok(c) => c,
        Err(e) => return Some(format!("server: {e}")),
    };
    if c.opcode != cqe_op::RESP_SEND || c.byte_cnt != 16 {
        return Some(format!("server: unexpected CQE {c:?}"));
    }
    let mut written = vec![0u8; 1000];
    mr.read(8192, &mut written);
    if written.iter().enumerate().any(|(i, &b)| b != (i as u8) ^ 0x3c) {
        return Some("server: the client's WRITE data is wrong".into());
    }
    // Answer with a WRITE with immediate into the client's memory.
    let reply = b"reply from the server process";
    let w = Wqe::write_imm(caddr + 100, crkey as u32, 0xabc, Payload::Inline(reply)).signaled();
    if let Err(e) = q.sq.post_and_ring(&w) {
        return Some(format!("server post: {e}"));
    }
    match wait_cqe(&mut q) {
        Ok(c) if c.opcode == cqe_op::REQ => None,
        Ok(c) => Some(format!("server: unexpected CQE {c:?}")),
        Err(e) => Some(format!("server: {e}")),
    }
}

#[test]
fn client_and_server_in_two_processes() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (s2c_r, s2c_w) = pipe();
    let (c2s_r, c2s_w) = pipe();
    // SAFETY: fork from this test's thread; the child only uses the model and the pipes, then
    // leaves with _exit (no unwinding, no atexit handlers of the test harness).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = match std::panic::catch_unwind(|| server(s2c_w, c2s_r)) {
            Ok(None) => 0,
            Ok(Some(msg)) => {
                // SAFETY: write to stderr from a live buffer.
                unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
                1
            }
            Err(_) => 2,
        };
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let (_m, mut q, mr) = setup();
    q.rq.post(&[DataSeg::new(mr.addr(), mr.lkey(), 64)]).unwrap();
    q.rq.ring();
    let [sqpn, srkey, saddr] = recv(s2c_r).expect("server endpoint");
    send(c2s_w, &[q.qp.qpn() as u64, mr.rkey() as u64, mr.addr()]);
    q.qp.connect(sqpn as u32, ModelConnect::default());
    recv(s2c_r).expect("server connected");
    let data: Vec<u8> = (0..1000).map(|i| (i as u8) ^ 0x3c).collect();
    mr.write(0, &data);
    let s = [DataSeg::new(mr.addr(), mr.lkey(), 1000)];
    q.sq.post(&Wqe::write(saddr + 8192, srkey as u32, Payload::Gather(&s)))
        .unwrap();
    q.sq.post(&Wqe::send(Payload::Inline(b"data is in place")).signaled())
        .unwrap();
    q.sq.ring();
    let c = wait_cqe(&mut q).expect("send completion");
    assert_eq!(c.opcode, cqe_op::REQ);
    let r = wait_cqe(&mut q).expect("the server's write-with-immediate");
    assert_eq!((r.opcode, u32::from_be(r.imm)), (cqe_op::RESP_WR_IMM, 0xabc));
    let mut got = [0u8; 29];
    mr.read(100, &mut got);
    assert_eq!(&got, b"reply from the server process");
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "server process failed: status {status}"
    );
}

#[test]
fn objects_of_a_dead_process_are_swept() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (r, w) = pipe();
    // SAFETY: as above; the child creates objects and dies without cleaning up.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let (_m, q, mr) = setup();
        send(w, &[q.qp.qpn() as u64, mr.rkey() as u64, 0]);
        // SAFETY: dies at once: no destructor runs, the files stay behind.
        unsafe { libc::_exit(0) };
    }
    let [qpn, key, _] = recv(r).expect("child objects");
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let dir = rdmaprobe::model::shm::dir();
    let qp_file = dir.join(format!("qp-{qpn:06x}"));
    let mr_file = dir.join(format!("mr-{key:06x}"));
    assert!(
        qp_file.exists() && mr_file.exists(),
        "the dead child's files should be there before the sweep"
    );
    let _m = Model::open(ModelConfig::default()).unwrap();
    assert!(
        !qp_file.exists() && !mr_file.exists(),
        "opening the model must sweep a dead process's objects"
    );
}
