//! Item handles: what `apf_workqueue_get` hands out and `apf_workqueue_done` takes back.
//!
//! They live in the generic handle slab (`crate::slab`), one per queue
//! with its own salt, so a handle of another queue is unknown here.
//!
//! A slot holds the item's key (an `Arc`) while the item is processing: the
//! key pointer `apf_workqueue_get` returns stays valid until `apf_workqueue_done` of that
//! handle, whatever the queue does with its own copy. Done retires the slot,
//! so a second done of the same handle is told apart from an unknown one.

use crate::slab::Slab;
use crate::sync::Arc;

/// A queue item: an arbitrary byte string.
pub(crate) type Key = Arc<[u8]>;

/// How an item slot's last occupant ended: the only way is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Done;

/// The handles of one queue's processing items.
pub(crate) type ItemSlab = Slab<Key, Done>;
