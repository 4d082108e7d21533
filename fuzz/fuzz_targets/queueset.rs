//! Differential fuzzing of the queueset: any byte string decodes to an
//! initial configuration and a sequence of operations (start, finish,
//! cancel, advance the clock, reconfigure), run through the optimised
//! queueset and the plain reference model; any difference in a decision or
//! in the fair-queuing state is a crash.
#![no_main]
use apf::queueset::differential::{check, Op};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((head, mut rest)) = data.split_first_chunk::<4>() else { return };
    let mut ops = Vec::new();
    while let Some(op) = Op::decode(&mut rest) {
        ops.push(op);
    }
    if let Err(difference) = check((head[0], head[1], head[2], head[3]), &ops) {
        panic!("{difference}");
    }
});
