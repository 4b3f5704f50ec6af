//! The store against MICA's rules: populate and GET every key, updates in place, inserts,
//! eviction from a full bucket, the log wrapping over old entries, batch order, refusals.

use super::*;
use crate::scenario::kv::op::{fill_value, request, HERD_MICA_OFFSET};

/// A request slot (all 64 bytes) with HERD's opcode turned into MICA's, as a worker leaves it.
fn mica(key: &[u8; 16], put: Option<&[u8]>) -> Vec<u8> {
    let (mut s, _) = request(key, put);
    s[op::OPCODE_AT] -= HERD_MICA_OFFSET;
    s.to_vec()
}

fn value(key: &[u8; 16], len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_value(key, &mut v);
    v
}

/// GETs `ids`, one batch each; the outcome and, for a hit, the value's bytes.
fn get(st: &mut Store, id: u32) -> (Outcome, Vec<u8>) {
    let r = mica(&keys::key(id), None);
    let mut out = Vec::new();
    st.batch(&[&r], &mut out).unwrap();
    let v = match out[0] {
        o @ Outcome::GetHit { .. } => o.value().to_vec(),
        _ => Vec::new(),
    };
    (out[0], v)
}

#[test]
fn a_populated_store_answers_every_key_with_its_value() {
    let mut st = Store::new(1 << 12, 1 << 20, 32).unwrap();
    st.populate(4096);
    assert_eq!(st.stats().put_inserts, 4096);
    for id in 0..4096 {
        let (o, v) = get(&mut st, id);
        let k = keys::key(id);
        match o {
            Outcome::GetHit { len: 32, .. } => op::check_value(&k, &v, 32).unwrap(),
            // an eviction at populate (a full bucket) or a key of the same tag loses a key, as
            // in MICA: only such a key misses
            Outcome::GetMiss => assert!(st.is_lost(&k), "key {id} missed, and the store did not lose it"),
            o => panic!("key {id}: {o:?}"),
        }
    }
    let s = st.stats();
    assert_eq!(s.get_hits + s.get_misses, 4096);
    // 4096 keys in 4096 buckets of 8: a bucket of 9 or more, or two keys of one tag in one
    // bucket, is rare; at most a handful lost, each counted
    assert!(s.get_misses <= s.evictions + s.collisions && s.get_misses < 8, "{s:?}");
    for id in 4096..4200 {
        assert_eq!(get(&mut st, id).0, Outcome::GetMiss, "key {id} was never inserted");
    }
}

#[test]
fn a_put_hit_writes_in_place_and_a_put_miss_inserts() {
    let mut st = Store::new(1 << 10, 1 << 16, 8).unwrap();
    st.populate(10);
    let k = keys::key(3);
    let other = [0xa5u8; 8];
    let (r, miss) = (
        mica(&k, Some(&other)),
        mica(&keys::key(500), Some(&value(&keys::key(500), 8))),
    );
    let mut out = Vec::new();
    let head = st.head;
    st.batch(&[&r, &miss], &mut out).unwrap();
    assert_eq!(out, [Outcome::Put, Outcome::Put]);
    assert_eq!((st.stats().put_hits, st.stats().put_inserts), (1, 11));
    assert_eq!(st.head, head + 32, "only the insert appended (18 + 8 B, rounded to 8)");
    assert_eq!(get(&mut st, 3).1, other);
    let (o, v) = get(&mut st, 500);
    assert!(matches!(o, Outcome::GetHit { len: 8, .. }));
    op::check_value(&keys::key(500), &v, 8).unwrap();
}

/// Keys with distinct tags, all in one bucket (a store of one bucket).
fn distinct_tags(n: usize) -> Vec<u32> {
    let mut seen = std::collections::HashSet::new();
    (0..)
        .filter(|&i| seen.insert(keys::fields(&keys::key(i)).tag))
        .take(n)
        .collect()
}

#[test]
fn a_full_bucket_evicts_the_slot_its_tag_names() {
    let mut st = Store::new(1, 1 << 16, 16).unwrap();
    let ids = distinct_tags(9);
    for &id in &ids {
        let k = keys::key(id);
        st.insert(&k, &value(&k, 16));
    }
    assert_eq!(st.stats().evictions, 1);
    // the slots filled from the last; the ninth key took slot tag & 7, whose key is gone
    let ninth = keys::fields(&keys::key(ids[8])).tag as usize & 7;
    let evicted = ids[7 - ninth];
    for &id in &ids {
        let (o, v) = get(&mut st, id);
        if id == evicted {
            assert_eq!(o, Outcome::GetMiss, "key {id} was evicted");
        } else {
            assert!(matches!(o, Outcome::GetHit { .. }), "key {id}: {o:?}");
            op::check_value(&keys::key(id), &v, 16).unwrap();
        }
    }
}

#[test]
fn the_log_wraps_over_its_oldest_entries() {
    // 4 KiB of 56-B entries (18 + 32, rounded to 8): 71 a lap before the 78-B margin
    let mut st = Store::new(1 << 12, 4096, 32).unwrap();
    st.populate(300);
    let s = st.stats();
    assert_eq!(s.wraps, 4, "{s:?}");
    let hits: Vec<u32> = (0..300)
        .filter(|&id| matches!(get(&mut st, id).0, Outcome::GetHit { .. }))
        .collect();
    // the newest lap's worth of keys is found (the entries of the last 4 KiB of the virtual
    // log), each with its value; every older one is not
    let newest: Vec<u32> = (300 - hits.len() as u32..300).collect();
    assert_eq!(hits, newest, "not the newest keys");
    assert!((60..=72).contains(&hits.len()), "{} found", hits.len());
    for id in hits {
        op::check_value(&keys::key(id), &get(&mut st, id).1, 32).unwrap();
    }
}

#[test]
fn a_batch_looks_every_key_up_before_it_acts() {
    // a GET behind a PUT that inserts the same key in one batch misses, as in MICA
    let mut st = Store::new(1 << 8, 1 << 16, 32).unwrap();
    let k = keys::key(42);
    let (p, g) = (mica(&k, Some(&value(&k, 32))), mica(&k, None));
    let mut out = Vec::new();
    st.batch(&[&p, &g], &mut out).unwrap();
    assert_eq!(out, [Outcome::Put, Outcome::GetMiss]);
    st.batch(&[&g], &mut out).unwrap();
    assert!(matches!(out[0], Outcome::GetHit { len: 32, .. }));
    assert_eq!(out[0].code(), op::MICA_RESP_GET_SUCCESS);
}

#[test]
fn what_a_store_refuses_is_named() {
    assert!(matches!(Store::new(3, 4096, 32), Err(StoreError::Geometry(_))));
    assert!(matches!(Store::new(4, 4000, 32), Err(StoreError::Geometry(_))));
    assert!(matches!(Store::new(4, 4096, 47), Err(StoreError::Geometry(_))));
    let mut st = Store::new(4, 4096, 32).unwrap();
    let k = keys::key(1);
    let mut out = Vec::new();
    let mut bad = mica(&k, None);
    bad[op::OPCODE_AT] = 7;
    assert_eq!(
        st.batch(&[&bad], &mut out),
        Err(StoreError::Opcode { index: 0, opcode: 7 })
    );
    let short = mica(&k, Some(&value(&k, 32)));
    assert_eq!(
        st.batch(&[&short[..40]], &mut out),
        Err(StoreError::Short {
            index: 0,
            got: 40,
            want: 50
        })
    );
    let e = st.batch(&[&mica(&k, Some(&[1; 8]))], &mut out).unwrap_err();
    assert!(matches!(e, StoreError::ValueLength { got: 8, want: 32, .. }), "{e}");
    assert!(e.to_string().contains(&keys::hex(&k)), "{e}");
    let g = mica(&k, None);
    let many: Vec<&[u8]> = vec![&g; 33];
    assert_eq!(st.batch(&many, &mut out), Err(StoreError::Batch(33)));
}

#[test]
fn a_key_of_the_same_tag_takes_the_slot_and_is_counted() {
    // two keys with one tag in a store of one bucket: MICA compares tags only when it inserts
    let mut seen = std::collections::HashMap::new();
    let (a, b) = (0..)
        .find_map(|i| seen.insert(keys::fields(&keys::key(i)).tag, i).map(|j| (j, i)))
        .unwrap();
    let mut st = Store::new(1, 1 << 16, 8).unwrap();
    for id in [a, b] {
        let k = keys::key(id);
        st.insert(&k, &value(&k, 8));
    }
    assert_eq!((st.stats().collisions, st.stats().evictions), (1, 0));
    assert!(st.is_lost(&keys::key(a)) && !st.is_lost(&keys::key(b)));
    assert_eq!(get(&mut st, a).0, Outcome::GetMiss, "key {a} lost to key {b}");
    assert!(matches!(get(&mut st, b).0, Outcome::GetHit { .. }));
    // the same key again is an update of its slot, not a collision
    let kb = keys::key(b);
    st.insert(&kb, &value(&kb, 8));
    assert_eq!(st.stats().collisions, 1);
}
