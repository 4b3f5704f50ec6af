//! The length of an x86-64 store instruction, for the doorbell trap (`super::trap`): a store to
//! a model0 register page is skipped (model0 reads the doorbell record and the send queue, never
//! the register page), so the handler needs only where the instruction ends. Only the stores a
//! doorbell or a BlueFlame copy is made of are recognised (`mov`, `movnti`, the SSE, AVX and
//! AVX-512 register stores); anything else is `None` and the trap single-steps it instead.

/// Longest x86 instruction.
const MAX_LEN: usize = 15;

/// The opcode map an instruction's opcode byte is read in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Map {
    One,
    Of0F,
    Other,
}

/// The length in bytes of the store instruction whose bytes `byte(0)`, `byte(1)`, ... are, or
/// `None` when it is not one of the recognised stores to memory. `byte` is asked only for bytes
/// of the instruction up to the first one that rules it out (the handler reads the code the CPU
/// just fetched, no further).
pub fn store_len(byte: impl Fn(usize) -> u8) -> Option<usize> {
    let mut i = 0;
    let mut opsize16 = false;
    let mut rep = false;
    // legacy prefixes: operand size, address size, segments, lock, rep
    loop {
        match byte(i) {
            0x66 => opsize16 = true,
            0xF2 | 0xF3 => rep = true,
            0x67 | 0x26 | 0x2E | 0x36 | 0x3E | 0x64 | 0x65 | 0xF0 => {}
            _ => break,
        }
        i += 1;
        if i >= MAX_LEN {
            return None;
        }
    }
    let mut rex_w = false;
    let (map, op) = match byte(i) {
        // REX, then the opcode
        r @ 0x40..=0x4F => {
            rex_w = r & 0x08 != 0;
            i += 1;
            opcode(&byte, &mut i)?
        }
        // two-byte VEX: map 0F
        0xC5 => {
            // pp, the implied prefix: 2 is F3
            rep = byte(i + 1) & 3 == 2;
            i += 2;
            (Map::Of0F, byte(i))
        }
        // three-byte VEX: the map in the low five bits of its second byte
        0xC4 => {
            let m = byte(i + 1) & 0x1F;
            rep = byte(i + 2) & 3 == 2;
            i += 3;
            (if m == 1 { Map::Of0F } else { Map::Other }, byte(i))
        }
        // EVEX (AVX-512: a 64-byte BlueFlame copy is one zmm store): the map in the low three
        // bits of its first payload byte, pp in the second's
        0x62 => {
            let m = byte(i + 1) & 0x07;
            rep = byte(i + 2) & 3 == 2;
            i += 4;
            (if m == 1 { Map::Of0F } else { Map::Other }, byte(i))
        }
        _ => opcode(&byte, &mut i)?,
    };
    i += 1;
    let imm = match (map, op) {
        (Map::One, 0x88 | 0x89) => 0,
        (Map::One, 0xC6) => 1,
        // a 16-bit immediate with 66, unless REX.W (a 64-bit store of a 32-bit immediate) wins
        (Map::One, 0xC7) => {
            if opsize16 && !rex_w {
                2
            } else {
                4
            }
        }
        // movups/movss, movaps, movntps, movq/movdqa/movdqu, movntdq/movntq, movnti, movq xmm
        (Map::Of0F, 0x11 | 0x29 | 0x2B | 0x7F | 0xE7 | 0xC3 | 0xD6) => 0,
        // movd/movq r/m from a register; with F3 it is a load (movq xmm, xmm/m64)
        (Map::Of0F, 0x7E) if !rep => 0,
        _ => return None,
    };
    let modrm = byte(i);
    i += 1;
    let (md, reg, rm) = (modrm >> 6, (modrm >> 3) & 7, modrm & 7);
    if md == 3 || (map == Map::One && matches!(op, 0xC6 | 0xC7) && reg != 0) {
        // a register destination (no store to memory), or not a mov of an immediate
        return None;
    }
    let mut disp = match md {
        1 => 1,
        2 => 4,
        _ => 0,
    };
    if rm == 4 {
        let sib = byte(i);
        i += 1;
        if md == 0 && sib & 7 == 5 {
            disp = 4;
        }
    } else if md == 0 && rm == 5 {
        // RIP-relative
        disp = 4;
    }
    let len = i + disp + imm;
    (len <= MAX_LEN).then_some(len)
}

/// Reads the opcode at `*i` (one byte, or `0F` and one more): its map and byte, `*i` on the
/// last opcode byte.
fn opcode(byte: &impl Fn(usize) -> u8, i: &mut usize) -> Option<(Map, u8)> {
    match byte(*i) {
        0x0F => {
            *i += 1;
            match byte(*i) {
                0x38 | 0x3A => None,
                b => Some((Map::Of0F, b)),
            }
        }
        // VEX or EVEX after a REX is not an instruction
        0x40..=0x4F | 0xC4 | 0xC5 | 0x62 => None,
        b => Some((Map::One, b)),
    }
}

#[cfg(test)]
mod tests {
    use super::store_len;

    fn len(code: &[u8]) -> Option<usize> {
        // a byte past the slice is a test failure: the decoder read beyond the instruction
        store_len(|i| *code.get(i).unwrap_or_else(|| panic!("read byte {i} of {code:02x?}")))
    }

    /// Encodings of each instruction in its comment (as GNU as writes them, or, where it would
    /// choose a shorter displacement, the longer form a compiler may also emit).
    #[test]
    fn the_stores_of_doorbells_and_blueflame_copies_have_their_lengths() {
        let cases: &[(&[u8], usize)] = &[
            (&[0x48, 0x89, 0x02], 3),                                      // mov %rax,(%rdx)
            (&[0x89, 0x44, 0x24, 0x08], 4),                                // mov %eax,0x8(%rsp)
            (&[0x48, 0x89, 0x84, 0x24, 0x00, 0x01, 0x00, 0x00], 8),        // mov %rax,0x100(%rsp)
            (&[0x48, 0x89, 0x05, 0x10, 0x00, 0x00, 0x00], 7),              // mov %rax,0x10(%rip)
            (&[0x89, 0x04, 0x25, 0x00, 0x10, 0x00, 0x00], 7),              // mov %eax,0x1000
            (&[0x4c, 0x89, 0x44, 0x8f, 0x40], 5),                          // mov %r8,0x40(%rdi,%rcx,4)
            (&[0x48, 0xc7, 0x00, 0x01, 0x00, 0x00, 0x00], 7),              // movq $0x1,(%rax)
            (&[0x66, 0xc7, 0x00, 0x01, 0x00], 5),                          // movw $0x1,(%rax)
            (&[0xc6, 0x40, 0x08, 0x01], 4),                                // movb $0x1,0x8(%rax)
            (&[0x66, 0x0f, 0x7f, 0x07], 4),                                // movdqa %xmm0,(%rdi)
            (&[0xf3, 0x0f, 0x7f, 0x47, 0x10], 5),                          // movdqu %xmm0,0x10(%rdi)
            (&[0x0f, 0x29, 0x47, 0x10], 4),                                // movaps %xmm0,0x10(%rdi)
            (&[0x0f, 0x11, 0x07], 3),                                      // movups %xmm0,(%rdi)
            (&[0x66, 0x0f, 0xe7, 0x07], 4),                                // movntdq %xmm0,(%rdi)
            (&[0x48, 0x0f, 0xc3, 0x07], 4),                                // movnti %rax,(%rdi)
            (&[0x66, 0x0f, 0xd6, 0x07], 4),                                // movq %xmm0,(%rdi)
            (&[0x66, 0x48, 0x0f, 0x7e, 0x07], 5),                          // movq %xmm0,(%rdi)
            (&[0xc5, 0xf9, 0x7f, 0x07], 4),                                // vmovdqa %xmm0,(%rdi)
            (&[0xc5, 0xfd, 0x7f, 0x47, 0x20], 5),                          // vmovdqa %ymm0,0x20(%rdi)
            (&[0xc4, 0xc1, 0x7d, 0x7f, 0x00], 5),                          // vmovdqa %ymm0,(%r8)
            (&[0xc4, 0x41, 0x78, 0x11, 0x84, 0x24, 0x00, 0x02, 0, 0], 10), // vmovups %xmm8,0x200(%r12)
            (&[0x64, 0x48, 0x89, 0x04, 0x25, 0x28, 0x00, 0x00, 0x00], 9),  // mov %rax,%fs:0x28
            (&[0x62, 0xe1, 0xfe, 0x48, 0x7f, 0x07], 6),                    // vmovdqu64 %zmm16,(%rdi)
            (&[0x62, 0xe1, 0xfe, 0x48, 0x7f, 0x4c, 0x17, 0xff], 8),        // vmovdqu64 %zmm17,-0x40(%rdi,%rdx,1)
            (&[0x62, 0xf1, 0x7c, 0x48, 0x11, 0x87, 0x00, 0x01, 0, 0], 10), // vmovups %zmm0,0x100(%rdi)
        ];
        for (code, want) in cases {
            assert_eq!(len(code), Some(*want), "{code:02x?}");
        }
    }

    #[test]
    fn loads_register_moves_and_other_instructions_are_not_skipped() {
        let cases: &[&[u8]] = &[
            &[0x48, 0x8b, 0x07],                   // mov (%rdi),%rax: a load
            &[0x48, 0x89, 0xc7],                   // mov %rax,%rdi: no memory
            &[0xf3, 0x0f, 0x7e, 0x07],             // movq (%rdi),%xmm0: a load
            &[0x66, 0x0f, 0x6f, 0x07],             // movdqa (%rdi),%xmm0: a load
            &[0xc5, 0xfa, 0x7e, 0x07],             // vmovq (%rdi),%xmm0: a load
            &[0xc5, 0xf9, 0x6f, 0x07],             // vmovdqa (%rdi),%xmm0: a load
            &[0xc7, 0x08],                         // c7 /1: not a mov
            &[0x0f, 0x38, 0x00],                   // a three-byte opcode
            &[0x62, 0xf1, 0x7e, 0x48, 0x6f, 0x07], // vmovdqu32 (%rdi),%zmm0: a load
            &[0x62, 0xf2, 0x7d, 0x48, 0x7f, 0x07], // EVEX map 0F38
            &[0x62, 0xf5, 0x7c, 0x48, 0x11, 0x07], // EVEX map 5 (AVX512-FP16)
            &[0x48, 0x62],                         // EVEX after a REX
            &[0xf0, 0x48, 0x01, 0x07],             // lock add %rax,(%rdi): a read-modify-write
            &[0x66; 15],                           // prefixes only
        ];
        for code in cases {
            assert_eq!(len(code), None, "{code:02x?}");
        }
    }
}
