//! A fork (subshell, command substitution, pipeline stage) costs the same whatever the
//! shell holds: the copy shares the parent's variables, arrays and positional parameters
//! (checked by pointer identity and by the memory meter, not by timing), and what a
//! timed-out command leaves is buried, not freed on the path that returns its result.

use super::*;
use crate::mem;

/// A shell holding `n` variables, an `n`-element array and `n` positional parameters.
fn big_shell(n: usize) -> Shell {
    let mut sh = Shell::new(1, "/".into());
    for i in 0..n {
        sh.vars
            .insert(format!("v{i}"), Var::s(format!("value {i}")));
    }
    let arr: ArrMap = (0..n as i64)
        .map(|i| (i, MStr::from(format!("element {i}"))))
        .collect();
    let mut a = Var::s("");
    a.value = Value::Arr(arr);
    sh.vars.insert("a".into(), a);
    sh.pos = Rc::new((0..n).map(|i| MStr::from(format!("arg {i}"))).collect());
    sh
}

fn arr<'s>(sh: &'s Shell, name: &str) -> &'s ArrMap {
    match &sh.vars.get(name).expect("the array").value {
        Value::Arr(m) => m,
        _ => panic!("{name} is no indexed array"),
    }
}

#[test]
fn a_fork_shares_the_whole_state() {
    for n in [10, 100_000] {
        let sh = big_shell(n);
        let before = mem::held();
        let child = sh.subshell(2);
        // nothing metered was copied, whatever the size
        assert_eq!(mem::held(), before, "n = {n}");
        assert!(
            child.vars.ptr_eq(&sh.vars),
            "n = {n}: the variables were copied"
        );
        assert!(
            arr(&child, "a").ptr_eq(arr(&sh, "a")),
            "n = {n}: the array was copied"
        );
        assert!(
            Rc::ptr_eq(&child.pos, &sh.pos),
            "n = {n}: the positional parameters were copied"
        );
        assert!(child.funcs.ptr_eq(&sh.funcs));
    }
}

#[test]
fn a_change_in_the_fork_copies_only_what_changed() {
    let sh = big_shell(100_000);
    let mut child = sh.subshell(2);
    child.vars.insert("v7".into(), Var::s("changed"));
    // the parent keeps its value; the untouched array is still the parent's
    assert_eq!(sh.get("v7").as_deref(), Some("value 7"));
    assert_eq!(child.get("v7").as_deref(), Some("changed"));
    assert!(arr(&child, "a").ptr_eq(arr(&sh, "a")));
    // changing the positional parameters copies them for the child only
    Rc::make_mut(&mut child.pos).truncate(1);
    assert_eq!(child.pos.len(), 1);
    assert_eq!(sh.pos.len(), 100_000);
}

#[test]
fn a_timed_out_shell_is_buried_then_reaped() {
    mem::reap();
    let before = mem::held();
    let sh = big_shell(10_000);
    let holding = mem::held();
    assert!(holding > before);
    set_ending(true);
    drop(sh);
    set_ending(false);
    // buried: still charged, not freed
    assert_eq!(mem::buried(), 1);
    assert_eq!(mem::held(), holding);
    mem::reap();
    assert_eq!(mem::buried(), 0);
    assert_eq!(mem::held(), before);
    // outside a timeout a shell is freed at once
    let sh = big_shell(100);
    drop(sh);
    assert_eq!(mem::buried(), 0);
    assert_eq!(mem::held(), before);
}
