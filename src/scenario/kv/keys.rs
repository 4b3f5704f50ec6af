//! HERD's keys and random draws, byte for byte as rdma_bench's client makes them
//! (`../shared/docs/herd-mica.md`): the generator `hrd_fastrand`, the per-client Fisher–Yates
//! permutation of the key numbers seeded with 0xdeadbeef, the order of the draws per request
//! (worker, update, key), and the 16 key bytes: CityHash128 v1.0.3 of the key number's four
//! little-endian bytes, stored as C's `uint128` is (`first`, then `second`, each little-endian).

/// The seed every HERD client starts from (`herd/client.c`).
pub const HERD_SEED: u64 = 0xdead_beef;

/// The multiplier and increment of `hrd_fastrand` (a 64-bit linear congruential generator whose
/// upper half is the draw).
const MUL: u64 = 1_103_515_245;
const INC: u64 = 12_345;

/// rdma_bench's `hrd_fastrand`: `seed = seed * 1103515245 + 12345`, the draw is `seed >> 32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastRand {
    seed: u64,
}

impl FastRand {
    /// A generator at `seed`.
    pub fn new(seed: u64) -> Self {
        FastRand { seed }
    }

    /// The state now.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// One draw.
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        self.seed = self.seed.wrapping_mul(MUL).wrapping_add(INC);
        (self.seed >> 32) as u32
    }

    /// Advances by `steps` draws at once (what `steps` calls of [`FastRand::next_u32`] would do), by
    /// composing the affine step with itself: HERD's client `c` first discards `c * keys` draws.
    pub fn skip(&mut self, mut steps: u64) {
        // the map s -> a*s + c, squared by composition: (a, c) o (a, c) = (a*a, a*c + c)
        let (mut a, mut c) = (MUL, INC);
        let (mut acc_a, mut acc_c) = (1u64, 0u64);
        while steps > 0 {
            if steps & 1 == 1 {
                // apply (a, c) after acc: s -> a*(acc_a*s + acc_c) + c
                acc_a = a.wrapping_mul(acc_a);
                acc_c = a.wrapping_mul(acc_c).wrapping_add(c);
            }
            c = a.wrapping_mul(c).wrapping_add(c);
            a = a.wrapping_mul(a);
            steps >>= 1;
        }
        self.seed = acc_a.wrapping_mul(self.seed).wrapping_add(acc_c);
    }
}

/// HERD's generator as a `rand_core` generator, so a distribution of `rand_distr` (the Zipf of
/// `--zipf`) draws from it: 32 bits are one draw, 64 bits two (high, then low).
impl rand_core::TryRng for FastRand {
    type Error = core::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok(self.next_u32())
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let hi = u64::from(self.next_u32());
        Ok(hi << 32 | u64::from(self.next_u32()))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        for c in dst.chunks_mut(4) {
            let w = self.next_u32().to_le_bytes();
            c.copy_from_slice(&w[..c.len()]);
        }
        Ok(())
    }
}

/// How the key index of a request is drawn.
#[derive(Debug, Clone, Copy)]
pub enum KeyDist {
    /// HERD's: `draw % n`.
    Uniform,
    /// Zipf over the ranks `0..n` (rank 0 the most drawn), rand_distr's sampler over HERD's
    /// generator; a rank is an index into the client's permutation, so each client's hot keys
    /// are its own.
    Zipf {
        /// The sampler.
        dist: rand_distr::Zipf<f64>,
        /// Its exponent.
        theta: f64,
    },
}

impl KeyDist {
    /// The Zipf exponent (none: uniform).
    pub fn theta(&self) -> Option<f64> {
        match self {
            KeyDist::Zipf { theta, .. } => Some(*theta),
            KeyDist::Uniform => None,
        }
    }

    /// Zipf with exponent `theta` over `n` ranks (`theta` 0 is uniform; YCSB's is 0.99).
    pub fn zipf(n: u32, theta: f64) -> Result<KeyDist, String> {
        rand_distr::Zipf::new(f64::from(n.max(1)), theta)
            .map(|dist| KeyDist::Zipf { dist, theta })
            .map_err(|e| format!("Zipf over {n} keys with exponent {theta}: {e}"))
    }
}

/// HERD's permutation of the key numbers `0..n` for client `client` (its global id): the
/// generator first skips `client * n` draws (rdma_bench skips `clt_gid * HERD_NUM_KEYS`, its `n`),
/// then a Fisher–Yates shuffle from the top, `j = draw % (i + 1)`. The generator is left where the
/// client's request draws start.
pub fn permutation(n: u32, client: u32, rng: &mut FastRand) -> Vec<u32> {
    rng.skip(u64::from(client) * u64::from(n));
    let mut keys: Vec<u32> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.next_u32() % (i + 1);
        keys.swap(i as usize, j as usize);
    }
    keys
}

/// One request's draws, in HERD's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draw {
    /// The worker it goes to.
    pub worker: u32,
    /// A PUT (else a GET).
    pub update: bool,
    /// The index into the client's permutation.
    pub index: u32,
}

/// The next request as HERD's client draws it: worker `draw % workers`, update when
/// `draw % 100 < update_pct`, key index `draw % n`.
#[inline]
pub fn draw(rng: &mut FastRand, workers: u32, update_pct: u32, n: u32) -> Draw {
    draw_from(rng, workers, update_pct, n, &KeyDist::Uniform)
}

/// As [`draw`], the key index from `dist`.
#[inline]
pub fn draw_from(rng: &mut FastRand, workers: u32, update_pct: u32, n: u32, dist: &KeyDist) -> Draw {
    let worker = rng.next_u32() % workers;
    let update = rng.next_u32() % 100 < update_pct;
    let index = match dist {
        KeyDist::Uniform => rng.next_u32() % n,
        KeyDist::Zipf { dist, .. } => {
            let r: f64 = rand_distr::Distribution::sample(dist, rng);
            (r as u32).clamp(1, n) - 1
        }
    };
    Draw { worker, update, index }
}

/// The 16 bytes of key number `i`: CityHash128 v1.0.3 of `i`'s four little-endian bytes, as
/// rdma_bench stores it (`first` in bytes 0-7, `second` in 8-15, each little-endian). The crate's
/// `u128` carries `first` in its high half.
pub fn key(i: u32) -> [u8; 16] {
    let h = cityhash_rs::cityhash_103_128(&i.to_le_bytes());
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&((h >> 64) as u64).to_le_bytes());
    k[8..].copy_from_slice(&(h as u64).to_le_bytes());
    k
}

/// MICA's view of a key's `second` half: the bucket (low 32 bits), the server (next 16) and the
/// tag (top 16), as `struct mica_key`'s bit-fields lie on x86-64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyFields {
    /// Bucket number before the mask.
    pub bkt: u32,
    /// Server field (unused by one store).
    pub server: u16,
    /// Tag kept in the index slot.
    pub tag: u16,
}

/// The bucket, server and tag of a key's bytes.
pub fn fields(key: &[u8; 16]) -> KeyFields {
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[8..]);
    let second = u64::from_le_bytes(b);
    KeyFields {
        bkt: second as u32,
        server: (second >> 32) as u16,
        tag: (second >> 48) as u16,
    }
}

/// A key's bytes as one would print them: `first` and `second` as 16-digit hex (C's `%016llx`
/// of the two halves), for error messages.
pub fn hex(key: &[u8; 16]) -> String {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(&key[..8]);
    b.copy_from_slice(&key[8..]);
    format!("{:016x}:{:016x}", u64::from_le_bytes(a), u64::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_is_the_same_as_drawing_one_by_one() {
        for steps in [0u64, 1, 2, 3, 7, 64, 1000, 4097] {
            let mut a = FastRand::new(HERD_SEED);
            let mut b = FastRand::new(HERD_SEED);
            for _ in 0..steps {
                a.next_u32();
            }
            b.skip(steps);
            assert_eq!(a, b, "{steps} steps");
        }
    }

    #[test]
    fn the_generator_is_rdma_bench_s() {
        // 0xdeadbeef * 1103515245 + 12345 (no wrap yet), as rdma_bench's hrd_fastrand leaves it
        let mut r = FastRand::new(HERD_SEED);
        let s1: u64 = 4_122_654_119_087_394_300;
        assert_eq!(r.next_u32(), (s1 >> 32) as u32);
        assert_eq!(r.seed(), s1);
    }

    fn unhex(s: &str) -> [u8; 16] {
        let mut k = [0u8; 16];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        k
    }

    // The expected values below were printed by rdma_bench's own code (efficient/rdma_bench
    // a038ec5): its mica/city.c (cityhash-c, CityHash v1.0.3) compiled with a small main that
    // prints CityHash128((char *)&i, 4) as the bytes of C's uint128 in memory, and herd/client.c's
    // get_random_permutation and request draws (hrd_fastrand from libhrd/hrd.h; 12 workers,
    // 50 % updates, HERD_NUM_KEYS 8M), each client from seed 0xdeadbeef.

    #[test]
    fn keys_are_rdma_bench_s_bytes() {
        let want = [
            "3c2f211c2cafd603ecc28b811e8d3c34",
            "f85bf90e16dbf2e539f0d1a776a598ee",
            "e28b43e5299b1c3f8a923af7742da65b",
            "0444017fce3cd41d6dfa1247bc25fa54",
        ];
        for (i, w) in want.iter().enumerate() {
            assert_eq!(key(i as u32), unhex(w), "key {i}");
        }
        assert_eq!(hex(&key(0)), "03d6af2c1c212f3c:343c8d1e818bc2ec");
    }

    /// A request as rdma_bench draws it: worker, update, key index, key number, key bytes.
    type Req = (u32, bool, u32, u32, &'static str);
    /// A client: its id, its permutation's first and last entries, the generator after the
    /// shuffle, its first requests.
    type Client = (u32, [u32; 6], u32, u64, [Req; 3]);

    #[test]
    fn clients_draw_rdma_bench_s_first_requests() {
        const N: u32 = 8 << 20;
        #[rustfmt::skip]
        let cases: [Client; 2] = [
            (0, [4488102, 3645086, 4536426, 306598, 1580084, 4369885], 3578900, 0xf23dfaca17805fce, [
                (10, false, 2762408, 6536826, "354a89c5043446a6c3a5bc2ec707fbd2"),
                (1, true, 5514197, 5452036, "4060451b188b524880148db3b0489806"),
                (5, false, 462514, 4094839, "1785e6eedba394f136c8bbfe52c4d529"),
            ]),
            (1, [5675593, 1676743, 5933250, 7820819, 4815546, 4471694], 688993, 0x9bc86dc3ad005fce, [
                (0, false, 1751657, 5760726, "64b72e4f17482051a47e572f2ce1c725"),
                (11, false, 4572262, 7888154, "a56c3c343a6b40779e7e14e065727eac"),
                (2, true, 4850721, 3616180, "4821c40ef17ee26d887995bbe8b28955"),
            ]),
        ];
        for (client, head, last, seed, reqs) in cases {
            let mut r = FastRand::new(HERD_SEED);
            let p = permutation(N, client, &mut r);
            assert_eq!(p[..6], head, "client {client}");
            assert_eq!(p[N as usize - 1], last, "client {client}");
            assert_eq!(r.seed(), seed, "client {client}: the generator after the shuffle");
            for (n, (wn, update, index, id, bytes)) in reqs.into_iter().enumerate() {
                let d = draw(&mut r, 12, 50, N);
                assert_eq!(
                    d,
                    Draw {
                        worker: wn,
                        update,
                        index
                    },
                    "client {client} request {n}"
                );
                assert_eq!(p[d.index as usize], id, "client {client} request {n}");
                assert_eq!(key(p[d.index as usize]), unhex(bytes), "client {client} request {n}");
            }
        }
    }

    #[test]
    fn zipf_draws_are_skewed_and_repeatable() {
        let n = 1000;
        let count = |theta: f64| {
            let d = KeyDist::zipf(n, theta).unwrap();
            let mut r = FastRand::new(HERD_SEED);
            let mut c = vec![0u32; n as usize];
            for _ in 0..100_000 {
                let x = draw_from(&mut r, 4, 0, n, &d);
                assert!(x.index < n && x.worker < 4);
                c[x.index as usize] += 1;
            }
            c
        };
        let (z, u) = (count(0.99), count(0.0));
        assert_eq!(z, count(0.99), "the same seed, the same draws");
        // theta 0.99 over 1000 ranks: rank 0 takes 1/H(1000, 0.99) ~ 13 % of the draws, rank 9
        // a tenth of that; theta 0 is uniform (0.1 % each)
        assert!((11_000..15_500).contains(&z[0]), "rank 0: {}", z[0]);
        assert!(z[0] > 7 * z[9] && z[9] > z[99], "{} {} {}", z[0], z[9], z[99]);
        assert!(u.iter().all(|&c| (40..170).contains(&c)), "uniform: {:?}", &u[..10]);
        assert!(KeyDist::zipf(n, -1.0).is_err());
    }

    #[test]
    fn a_permutation_holds_every_key_once() {
        let mut r = FastRand::new(HERD_SEED);
        let mut p = permutation(1000, 3, &mut r);
        assert_ne!(p, (0..1000).collect::<Vec<_>>());
        p.sort_unstable();
        assert_eq!(p, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn fields_split_second_as_mica_s_bitfields() {
        let mut k = [0u8; 16];
        k[8..].copy_from_slice(&0x1234_5678_9abc_def0u64.to_le_bytes());
        assert_eq!(
            fields(&k),
            KeyFields {
                bkt: 0x9abc_def0,
                server: 0x5678,
                tag: 0x1234
            }
        );
        assert_eq!(hex(&k), "0000000000000000:123456789abcdef0");
    }
}
