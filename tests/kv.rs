//! The key-value workload on model0 through libibverbs + libmlx5 (the verbs and wr backends): HERD's
//! requests as inline UC WRITEs into the region, responses as UD SEND_WITH_IMM, every GET's
//! value checked by its client, in one process.

use rdmaprobe::backend::kv::verbs::loopback;
use rdmaprobe::backend::setup::Dev;
use rdmaprobe::backend::BackendKind;
use rdmaprobe::model::ModelConfig;
use rdmaprobe::scenario::kv::engine::Shape;
use rdmaprobe::scenario::kv::op::Layout;
use rdmaprobe::scenario::kv::run::{self, KvParams};
use std::time::Duration;

fn dev() -> Dev {
    Dev::open(Some("model0"), 1, None, ModelConfig::default()).unwrap().0
}

fn params(workers: u32, clients: u32, window: u32, update_pct: u32, requests: u64, postlist: u32) -> KvParams {
    KvParams {
        shape: Shape {
            layout: Layout {
                workers,
                clients,
                window,
            },
            keys: 4096,
            update_pct,
            val_len: 32,
        },
        postlist,
        requests,
        stall: Duration::from_secs(10),
        deadline: Duration::from_secs(120),
    }
}

#[test]
fn every_request_is_answered_over_uc_and_ud_on_model0() {
    let d = dev();
    for (kind, update, postlist) in [
        (BackendKind::Verbs, 0, 32),
        (BackendKind::Verbs, 50, 1),
        (BackendKind::Wr, 50, 32),
        (BackendKind::Wr, 0, 1),
    ] {
        let p = params(2, 3, 16, update, 2000, postlist);
        let mut paths = loopback(&d, kind, p.shape.layout).unwrap();
        let r = run::loopback(&mut paths.clients, &mut paths.workers, &p).unwrap();
        for (i, c) in r.clients.iter().enumerate() {
            assert_eq!((c.issued, c.answered), (2000, 2000), "client {i}");
            assert_eq!(r.latency[i].len(), 2000);
            assert!(
                r.latency[i].iter().all(|&t| t > 0),
                "client {i}: a request answered in 0 ticks"
            );
        }
        let hits: u64 = r.clients.iter().map(|c| c.get_hits).sum();
        let puts: u64 = r.clients.iter().map(|c| c.puts).sum();
        let served: u64 = r.workers.iter().map(|w| w.requests).sum();
        assert_eq!(served, 6000);
        assert_eq!(hits, r.workers.iter().map(|w| w.store.get_hits).sum::<u64>());
        if update == 0 {
            assert_eq!((hits, puts), (6000, 0));
        } else {
            assert!((2500..3500).contains(&puts), "{puts} PUTs of 6000 at 50 %");
        }
        let batches: u64 = r.workers.iter().map(|w| w.batches).sum();
        if postlist == 1 {
            assert_eq!(batches, served);
        }
    }
}

#[test]
fn a_run_whose_requests_go_unanswered_stops_at_the_stall_deadline() {
    let d = dev();
    let mut p = params(1, 1, 8, 0, 100, 8);
    p.stall = Duration::from_secs(1);
    let mut paths = loopback(&d, BackendKind::Verbs, p.shape.layout).unwrap();
    // no worker steps: the first window's requests are written and never answered
    let t = std::time::Instant::now();
    let e = run::loopback(&mut paths.clients, &mut paths.workers[..0], &p).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    let s = e.to_string();
    assert!(matches!(e, run::KvRunError::Stalled { .. }), "{s}");
    assert!(s.contains("client 0: 8 written, 0 answered"), "{s}");
}

#[test]
fn the_direct_backend_is_refused_by_name_for_now() {
    let l = Layout {
        workers: 1,
        clients: 1,
        window: 8,
    };
    let e = loopback(&dev(), BackendKind::Direct, l).err().expect("refused");
    assert!(e.to_string().contains("verbs and wr backends so far"), "{e}");
}
