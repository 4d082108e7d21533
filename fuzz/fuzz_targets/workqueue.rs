//! Differential fuzzing of the workqueue family: any byte string decodes to
//! a queue kind (delaying FIFO, two lanes, priorities, controller-runtime's
//! priority queue) and a sequence of operations (add, delayed add, try-get,
//! done, clock advance, shutdown), run on the queue and on a plain model of
//! client-go's rules; any difference is a crash.
#![no_main]
use apf::workqueue::differential::{check, Kind, Op};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, mut rest)) = data.split_first() else { return };
    let mut ops = Vec::new();
    while let Some(op) = Op::decode(&mut rest) {
        ops.push(op);
    }
    if let Err(difference) = check(Kind::decode(kind), &ops) {
        panic!("{difference}");
    }
});
