//! One memory budget per machine: what its variables, arrays, pipes and queued background
//! output hold is metered here, and with the bytes of its files (the virtual filesystem
//! counts those) it is held against the machine's one memory budget.
//!
//! The meter is per thread: a machine's command runs on one thread from start to end
//! (commands on one machine are serialized), and everything metered is created and dropped
//! inside that run. A metered value charges its bytes when it is made and releases them
//! when dropped: every array slot and every buffer counts; variable text is shared between
//! a shell and its subshells' copies (as a forked bash shares pages), so it counts once. The interpreter compares the meter with the budget at every
//! tick and whenever a buffer or a word grows, so a machine ends with
//! `Error::Terminated("memory limit exceeded ...")` before it holds much more than its
//! budget: the overshoot is at most one step's growth (one chunk of a pipe, one word,
//! which is itself bounded by a quarter of the budget).
//!
//! Positional parameters are [`MStr`]s as variables are (a function call's frame holds
//! the caller's, metered too). Lists of fields that live as plain `String`s for the length
//! of one step (the argument vector of a command being expanded and run, the word list of
//! a `for` loop) are charged through a [`Charge`] held for that step, each field with its
//! `String` header, and the meter is checked as each word's fields join the list: so
//! `echo "$x" "$x" ...` or `set -- "$@" "$@"` ends at the budget, not at the host's memory.
//!
//! Not metered: the parsed script, small per-command bookkeeping (at most a few KiB per
//! nesting level, and nesting is bounded), and words while they are being built, which
//! check the meter themselves.

use std::cell::Cell;

thread_local! {
    static HELD: Cell<u64> = const { Cell::new(0) };
}

/// Bytes metered on this thread now.
pub fn held() -> u64 {
    HELD.with(|h| h.get())
}

fn charge(n: usize) {
    let _ = HELD.try_with(|h| h.set(h.get().saturating_add(n as u64)));
}

fn release(n: usize) {
    // `try_with`: buried values may be dropped while the thread's locals are torn down
    let _ = HELD.try_with(|h| h.set(h.get().saturating_sub(n as u64)));
}

thread_local! {
    static GRAVE: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Keeps `value` alive until the next [`reap`] on this thread instead of dropping it now.
///
/// What a command leaves when it ends by its timeout (its shell's variables and arrays,
/// queued background output) can take a few hundred milliseconds to free: it is buried
/// here so the caller gets its result first. The machine reaps at its next command's
/// start, before that command's clock starts, and when it is dropped. Buried bytes stay
/// charged to this thread's meter until reaped, which happens before the next command
/// reads the meter.
pub fn bury<T: 'static>(value: T) {
    if std::mem::needs_drop::<T>() {
        let _ = GRAVE.try_with(|g| g.borrow_mut().push(Box::new(value)));
    }
}

/// A vector a program builds (a million strings, a thousand compiled regexes) whose
/// freeing is paced: freeing a million strings takes tens of milliseconds, enough to run
/// past a deadline in one step. When dropped, it frees its elements [`FREE_PER_CHECK`] at
/// a time, looking at [`crate::shell::stop_due`] between pieces, and buries ([`bury`])
/// what is left once the command must stop (all of it when the running command's own
/// timeout already fired, [`crate::shell::ending`]).
pub struct PacedVec<E: 'static>(Vec<E>);

/// How many elements [`PacedVec`] frees between two looks at the clock.
pub const FREE_PER_CHECK: usize = 16 * 1024;

impl<E: 'static> PacedVec<E> {
    /// Holds `v`.
    pub fn new(v: Vec<E>) -> Self {
        PacedVec(v)
    }
}

impl<E: 'static> std::ops::Deref for PacedVec<E> {
    type Target = Vec<E>;
    fn deref(&self) -> &Vec<E> {
        &self.0
    }
}

impl<E: 'static> std::ops::DerefMut for PacedVec<E> {
    fn deref_mut(&mut self) -> &mut Vec<E> {
        &mut self.0
    }
}

impl<E: 'static> Drop for PacedVec<E> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<E>() {
            return;
        }
        let v = &mut self.0;
        while v.len() > FREE_PER_CHECK {
            if crate::shell::ending() || crate::shell::stop_due() {
                bury(std::mem::take(v));
                return;
            }
            v.truncate(v.len() - FREE_PER_CHECK);
        }
    }
}

/// Drops what `items` yields [`FREE_PER_CHECK`] elements at a time, looking at
/// [`crate::shell::stop_due`] between pieces, and buries ([`bury`]) the rest once the
/// command must stop, as [`PacedVec`] does: for a million-element array or argument list
/// being replaced (`a=("${a[@]}")`, `set -- $(cat f)`), whose freeing in one step ran
/// tens of milliseconds past a deadline. An `imbl` map's consuming iterator frees its
/// elements a leaf at a time.
pub fn drop_paced<I: IntoIterator>(items: I)
where
    I::IntoIter: 'static,
{
    let mut rest = items.into_iter();
    loop {
        for _ in 0..FREE_PER_CHECK {
            if rest.next().is_none() {
                return;
            }
        }
        if crate::shell::ending() || crate::shell::stop_due() {
            bury(rest);
            return;
        }
    }
}

/// Drops everything [`bury`] kept on this thread.
pub fn reap() {
    let dead = GRAVE
        .try_with(|g| std::mem::take(&mut *g.borrow_mut()))
        .unwrap_or_default();
    drop(dead);
}

/// How many values are buried on this thread.
#[cfg(test)]
pub fn buried() -> usize {
    GRAVE.try_with(|g| g.borrow().len()).unwrap_or(0)
}

/// A metered string: a variable's value or an array element. Immutable and shared, so a
/// subshell's copy of the variables shares their text as a forked bash shares its pages:
/// the bytes are charged once, when the text is made, and released when its last holder
/// drops it. Text under [`crate::shell::CHUNK_BYTES`] is one allocation, as a `String` is;
/// a longer `String` is kept as it is (moved, not copied), so storing a word of hundreds of
/// megabytes costs no copy that could run past a deadline.
#[derive(Clone)]
pub struct MStr(Text);

#[derive(Clone)]
enum Text {
    Small(std::rc::Rc<str>),
    Big(std::rc::Rc<String>),
}

impl MStr {
    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Text::Small(s) => s,
            Text::Big(s) => s.as_str(),
        }
    }
}

impl PartialEq for MStr {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for MStr {}

impl PartialOrd for MStr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MStr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for MStr {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_str().hash(h)
    }
}

impl Drop for MStr {
    fn drop(&mut self) {
        let last = match &self.0 {
            Text::Small(s) => std::rc::Rc::strong_count(s) == 1,
            Text::Big(s) => std::rc::Rc::strong_count(s) == 1,
        };
        if last {
            release(self.as_str().len());
        }
    }
}

impl Default for MStr {
    fn default() -> Self {
        MStr::from("")
    }
}

impl From<&str> for MStr {
    fn from(s: &str) -> Self {
        charge(s.len());
        MStr(Text::Small(std::rc::Rc::from(s)))
    }
}

impl From<String> for MStr {
    fn from(s: String) -> Self {
        if s.len() < crate::shell::CHUNK_BYTES {
            return MStr::from(s.as_str());
        }
        charge(s.len());
        MStr(Text::Big(std::rc::Rc::new(s)))
    }
}

impl From<MStr> for String {
    fn from(m: MStr) -> String {
        m.as_str().to_string()
    }
}

impl std::ops::Deref for MStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for MStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for MStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

impl std::fmt::Display for MStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

/// Bytes held in plain (unmetered) values for the length of one step, such as the fields
/// of a command's argument vector: charged as they are added, released when the charge
/// is dropped, so it must live as long as the values it stands for.
#[derive(Default)]
pub struct Charge(usize);

impl Charge {
    /// Charges `n` bytes.
    pub fn add_bytes(&mut self, n: usize) {
        charge(n);
        self.0 = self.0.saturating_add(n);
    }

    /// Charges the bytes of `fields`, each with its `String` header.
    pub fn add_fields(&mut self, fields: &[String]) {
        let n = fields
            .iter()
            .map(|f| f.len().saturating_add(std::mem::size_of::<String>()))
            .fold(0usize, usize::saturating_add);
        charge(n);
        self.0 = self.0.saturating_add(n);
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        release(self.0);
    }
}

/// A metered byte buffer: a pipe, a captured stream, queued background output.
#[derive(Default)]
pub struct MBytes(Vec<u8>);

impl MBytes {
    /// A buffer holding `v`.
    pub fn new(v: Vec<u8>) -> Self {
        charge(v.len());
        MBytes(v)
    }
    /// Appends `d`.
    pub fn extend_from_slice(&mut self, d: &[u8]) {
        charge(d.len());
        self.0.extend_from_slice(d);
    }
    /// Takes the bytes out, leaving the buffer empty.
    pub fn take(&mut self) -> Vec<u8> {
        let v = std::mem::take(&mut self.0);
        release(v.len());
        v
    }
}

impl Clone for MBytes {
    fn clone(&self) -> Self {
        MBytes::new(self.0.clone())
    }
}

impl Drop for MBytes {
    fn drop(&mut self) {
        release(self.0.len());
    }
}

impl std::ops::Deref for MBytes {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl std::fmt::Debug for MBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MBytes({} bytes)", self.0.len())
    }
}
