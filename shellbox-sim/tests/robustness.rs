//! Odd input never panics the simulator (an internal panic would show as "internal error"
//! on stderr) and never hangs.

use std::time::Duration;

use shellbox_core::{Command, MachineSpec};
use shellbox_sim::SimMachineFactory;

const ODD: &[&str] = &[
    "",
    "echo 'unterminated",
    "echo \"unterminated",
    "echo ${",
    "echo $((",
    "echo $(( 1 +",
    "((",
    "if then fi",
    "case",
    "for in do done",
    "f() {",
    "}",
    "echo ${x:-${y:-${z}}}",
    "echo ${#}${##}${#-}",
    "echo ${!}",
    "a=(); echo ${a[-1]} ${a[@]: -5:2} ${a[-10]}",
    "a=(1 2); a[-5]=x; echo ${a[@]}",
    "s=é€𝄞; echo ${s:1:1} ${#s} ${s^^} ${s: -1}",
    "echo ${s:-1:-1} ${s:99999999999999999999}",
    "echo $(( 9223372036854775807 * 9223372036854775807 )) $(( -9223372036854775807 - 2 ))",
    "echo $(( 1 << 64 )) $(( 1 >> -1 )) $(( 2 ** 62 * 4 ))",
    "echo $(( -9223372036854775807 - 1 )); echo $(( (-9223372036854775807 - 1) / -1 )) $(( (-9223372036854775807 - 1) % -1 ))",
    "x=x; echo $(( x ))",
    "a=b; b=a; echo $(( a ))",
    "printf '%' ; printf '%5' ; printf '%.q' x; printf '%*.*d\\n' 999999999 3 1 | wc -c",
    "printf '%d %d %f\\n' 99999999999999999999 -0x 1e999",
    "printf '\\x' '\\u' '\\777'; printf '%b' '\\x\\u\\U\\0'",
    "echo -e '\\x\\u\\c'; echo $'\\x\\u\\c'",
    "read -n -1 x <<< abc; read -d '' y <<< abc; echo $x $y",
    "exec 99>&-; exec 3>&9; echo x >&7; cat <&8",
    "cat < /nonexistent; > /; < /dev/zero head -c 2 | wc -c",
    "seq 1 0 5; seq 5 1; seq; seq a; seq 1 1e2 3",
    "head -n -999 /dev/null; tail -c -5; head -c abc",
    "cd; cd ''; cd /dev/null; pushd; popd; dirs",
    "shift 99; shift -1; set -- $(seq 1 3); shift 3; echo $#",
    "getopts; getopts a; getopts a b c d",
    "trap; trap -- ; trap x NOPE; kill; kill -99 1; kill %9",
    "wait 999; wait %5; jobs -l; fg; bg",
    "declare -A a; a[]=x; declare -a b=([x]=1); echo ${a[@]} ${b[@]}",
    "local x; return; break; continue 0; exit 999999999999",
    "[[ a =~ ( ]]; [[ -q x ]]; [ 1 -eq ]; [ ( ]; test -z; test a b c d e",
    "x=$'\\0'; echo ${#x}; printf 'a\\0b' | wc -c",
    "mkdir -p /a/b; ln -s /a/b/../.. /a/b/loop; ls -R /a | head -5; cd /a/b/loop/a/b/loop; pwd",
    "ln -s l1 l2; ln -s l2 l1; cat l1; [ -e l1 ]; echo $?",
    "mv / /x; rm -rf /; ls /; echo still",
    "cp -r /tmp /tmp/inner; cp /dev/null /dev/null",
    "touch /dev/null/x; mkdir /dev/null/y; echo > /dev/null/z",
    "f() { f; }; f",
    "eval \"$(printf 'echo %.0s' $(seq 1 200))\"",
    "x=$(x=$(x=$(x=$(echo deep); echo $x); echo $x); echo $x); echo $x",
    ": $(( $(( $(( 1 )) )) ))",
    "echo {1..3..0} {a..Z} {9999999999..9999999998} {1..100000..50000}",
    "echo ****; echo [; echo [!; echo [[:alpha:; echo *(*(*(*(a)))) ",
    "shopt -s extglob; echo !(!(!(x))) @() +()",
    "case x in [) echo a;; esac; case '' in *) echo any;; esac",
    "date -d 'next tuesday'; date +%Q; touch -d yesterday f",
    "stat; stat -c; chmod; chmod 999 x; chmod u+q x; ln; mv; cp",
    "sleep -1; sleep x; sleep 1e999; timeout x sleep 1; timeout 1",
    "bash -c; sh -c 'exit 300'; echo $?; bash /nonexistent; bash -o",
    "IFS=; set -- a b; echo \"$*\"; IFS=; x='a b'; echo $x",
    "unset PATH; ls; echo $?",
    "unset IFS HOME PWD; echo ~ $PWD",
    "set -o nounset; echo ${arr[@]} ${#undefined} \"$@\"",
    "exec",
    "exec echo",
    "select x in a b; do break; done",
    "time true",
    "coproc x { cat; }",
    "echo >(cat)",
    "cat <(cat <(cat <(echo nested)))",
    "mapfile -t; readarray -d '' x < /dev/null; echo ${#x[@]}",
];

/// Input nested deeper than the parser can take is refused, never a host stack overflow;
/// runaway recursion stops at a nesting limit.
#[test]
fn deep_nesting_is_refused_not_fatal() {
    let f = SimMachineFactory::new();
    let scripts = [
        format!("{}echo hi{}", "(".repeat(5000), ")".repeat(5000)),
        format!("echo $(({}1{}))", "(".repeat(5000), ")".repeat(5000)),
        format!(
            "{}echo hi; {}",
            "if true; then ".repeat(3000),
            "fi; ".repeat(3000)
        ),
        format!("echo {}x{}", "${a:-".repeat(3000), "}".repeat(3000)),
        "x='eval \"$x\"'; eval \"$x\"".to_string(),
        // operator chains the arithmetic parser recursed into until the process's stack
        // overflowed (break-it of issue 16: SIGSEGV / "stack overflow, aborting")
        "s=$(printf '%.0s!' $(seq 50000))1; echo $((s))".to_string(),
        "s=$(printf '%.0s1+' $(seq 70000))1; echo $((s))".to_string(),
        "s=$(printf '%.0s1+' $(seq 70000))1; (( s ))".to_string(),
        "s=$(printf '%.0s-' $(seq 90000))1; let x=s".to_string(),
        format!("echo $(({}1))", "~".repeat(100_000)),
        format!("(( {}1 ))", "1+".repeat(60_000)),
        // `[[ ]]` operator chains: the program parser recursed per operator (break-it of
        // issue 16: 5,000 of either aborted the process)
        format!("[[ a{} ]]", " && a".repeat(5000)),
        format!("[[ {}a ]]", "! ".repeat(5000)),
        // subscripts nested in arithmetic: brush-parser's grammar backtracks ~10x per level,
        // inside the parser where no deadline is looked at (break-it of issue 16: 7 levels
        // ran past 35 s under a 1 s timeout and SIGTERM)
        format!("a=(0); echo $(({}0{}))", "a[".repeat(7), "]".repeat(7)),
    ];
    for script in &scripts {
        let m = f.create_sim(MachineSpec::sim()).unwrap();
        let r = m
            .run_sync(Command::shell(script.as_str()).timeout(Duration::from_secs(60)))
            .unwrap();
        assert_ne!(r.exit_code, Some(0), "{}", &script[..40]);
        let r = m.run_sync(Command::shell("echo ok")).unwrap();
        assert_eq!(r.stdout, "ok\n");
    }
}

/// Subscripts nested up to the bound still compute as bash does.
#[test]
fn nested_subscripts_up_to_the_bound_compute() {
    let f = SimMachineFactory::new();
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let r = m
        .run_sync(Command::shell(
            "a=(1 2 3 0); echo $((a[a[a[a[3]]]])) ${a[a[a[0]]]}; b=(1 1); echo ${b[b[b[b[b[b[b[0]]]]]]]}",
        ))
        .unwrap();
    assert_eq!(r.stdout, "3 3\n1\n", "{:?}", r.stderr);
}

#[test]
fn odd_scripts_never_panic() {
    let f = SimMachineFactory::new();
    for script in ODD {
        let m = f.create_sim(MachineSpec::sim()).unwrap();
        let r = m
            .run_sync(Command::shell(*script).timeout(Duration::from_secs(10)))
            .unwrap_or_else(|e| panic!("{script:?}: {e}"));
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(
            !err.contains("internal error"),
            "{script:?} panicked: {err}"
        );
        // the machine stays usable
        let r = m.run_sync(Command::shell("echo ok")).unwrap();
        assert_eq!(r.stdout, "ok\n", "{script:?}");
    }
}

fn run_with_timeout(script: &str, timeout: Duration) -> shellbox_core::CommandResult {
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap();
    m.run_sync(Command::shell(script).timeout(timeout))
        .unwrap_or_else(|e| panic!("{script:?}: {e}"))
}

fn assert_no_panic(script: &str, r: &shellbox_core::CommandResult) {
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        !err.contains("internal error"),
        "{script:?} panicked: {err}"
    );
}

/// Issue 16 finding 1: a precision over Rust's formatter limit (65,535) is formatted, not
/// a panic; digits past an f64's exact decimals are zeros, as in C.
#[test]
fn printf_takes_any_precision() {
    let r = run_with_timeout("printf '%.65536f' 1 | wc -c", Duration::from_secs(10));
    assert_no_panic("printf", &r);
    assert_eq!(r.stdout, "65538\n");
    let r = run_with_timeout(
        "printf '%.70000e\\n' 2.5 | head -c 4; echo; printf '%.70000e' 2.5 | wc -c",
        Duration::from_secs(10),
    );
    assert_no_panic("printf e", &r);
    assert_eq!(r.stdout, "2.50\n70006\n");
}

/// Issue 16 finding 2: input brush-parser panics on is bash's syntax error (status 2,
/// recorded), never "simulator panicked".
#[test]
fn parser_panics_are_syntax_errors() {
    for script in [
        "echo 99999999999>/dev/null",
        "${\"\"<<EOF\n}\nEOF\n",
        "$[))<< ($[$]\n",
    ] {
        let m = SimMachineFactory::new()
            .create_sim(MachineSpec::sim())
            .unwrap();
        let r = m
            .run_sync(Command::shell(script).timeout(Duration::from_secs(10)))
            .unwrap();
        assert_no_panic(script, &r);
        assert_eq!(r.exit_code, Some(2), "{script:?}: {r:?}");
        assert!(
            m.unsupported().iter().any(|u| u.starts_with("syntax:")),
            "{script:?}: {:?}",
            m.unsupported()
        );
        let r = m
            .run_sync(Command::shell(format!(
                "eval {}; echo $?",
                shell_quote(script)
            )))
            .unwrap();
        assert_no_panic(script, &r);
        assert!(r.stdout.ends_with(b"2\n"), "{script:?}: {r:?}");
    }
}

/// Issue 16, the 5-minute fuzz run, seed 4: a redirection of a huge descriptor number
/// grew the shell's descriptor table to it (8 GB asked for, which aborted the fuzzing
/// process under its address-space cap). A descriptor at or past the open-files limit
/// (1024, bash under `ulimit -n 1024`) is refused as bash refuses it; closing one is no
/// error.
#[test]
fn huge_descriptor_numbers_are_bad_descriptors() {
    let r = run_with_timeout(
        "echo hi 1024>f; echo $?; echo hi 1023>f; echo $?; exec 1000000000>&-; echo $?; \
         cat 5000<<<x; echo $?; cat 2000000000<<EOF\nx\nEOF\necho $?; : 1000000000<f; echo $?",
        Duration::from_secs(10),
    );
    assert_no_panic("descriptors", &r);
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "1\nhi\n0\n0\n1\n1\n1\n",
        "{r:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&r.stderr),
        "bash: 1024: Bad file descriptor\nbash: 5000: Bad file descriptor\n\
         bash: 2000000000: Bad file descriptor\nbash: 1000000000: Bad file descriptor\n",
        "{r:?}"
    );
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Issue 16 finding 3: a brace step whose size overflows leaves the word as it is (bash).
#[test]
fn brace_steps_never_overflow() {
    let r = run_with_timeout(
        "echo {1..2..-9223372036854775808}; echo {9223372036854775800..9223372036854775807..5}; echo {a..e..9223372036854775807}",
        Duration::from_secs(10),
    );
    assert_no_panic("brace", &r);
    assert_eq!(
        r.stdout,
        "{1..2..-9223372036854775808}\n9223372036854775800 9223372036854775805\na\n"
    );
}

/// Issue 16 finding 4: `cp -r` refuses a directory into itself (GNU's words) and a big
/// tree copy honours the timeout.
#[test]
fn cp_refuses_a_directory_into_itself() {
    let r = run_with_timeout(
        "mkdir -p /a/b; cp -r /a /a/b; echo $?; cd /; cp -r a a/b/c; echo $?; ls /a/b",
        Duration::from_secs(10),
    );
    assert_no_panic("cp", &r);
    assert_eq!(r.stdout, "1\n1\n");
    assert_eq!(
        String::from_utf8_lossy(&r.stderr),
        "cp: cannot copy a directory, '/a', into itself, '/a/b/a'\n\
         cp: cannot copy a directory, 'a', into itself, 'a/b/c'\n"
    );
    let r = run_with_timeout("cp -r / /tmp/x; echo $?", Duration::from_secs(1));
    assert_eq!(r.stdout, "1\n");
    // a wide tree copied many times ends at the timeout, not long after
    let started = std::time::Instant::now();
    let r = run_with_timeout(
        "mkdir -p /t; cd /t; touch $(seq 1 3000); i=0; while :; do i=$((i+1)); cp -r /t /u$i; done",
        Duration::from_secs(1),
    );
    assert_eq!(r.reason, shellbox_core::ExitReason::TimedOut, "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

/// Issue 16 finding 5: pattern operations are near-linear (they took 17 s, over a minute
/// and 3 s) and give bash's results.
#[test]
fn pattern_operations_are_near_linear() {
    let cases = [
        ("x=$(printf '%4000s'); y=${x//a/b}; echo ${#y}", "4000\n"),
        ("x=$(printf '%4000s'); y=${x// /ab}; echo ${#y}", "8000\n"),
        ("x=$(seq 5000); y=${x//?/ab}; echo ${#y}", "47784\n"),
        (
            "x=$(printf '%50000s'); y=${x%a}; z=${x%%*( )}; echo ${#y} ${#z}",
            "50000 0\n",
        ),
        (
            "x=$(printf '%50000s'); y=${x##*b}; w=${x#*a}; echo ${#y} ${#w}",
            "50000 50000\n",
        ),
        ("x=$(seq 20000); y=${x//[0-9]/}; echo ${#y}", "19999\n"),
    ];
    for (script, want) in cases {
        let started = std::time::Instant::now();
        let r = run_with_timeout(
            &format!("shopt -s extglob; {script}"),
            Duration::from_secs(20),
        );
        assert_no_panic(script, &r);
        assert_eq!(String::from_utf8_lossy(&r.stdout), want, "{script}: {r:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{script}: {:?}",
            started.elapsed()
        );
    }
    // what stays super-linear (negation, `!(...)`) still ends at the deadline
    let started = std::time::Instant::now();
    let r = run_with_timeout(
        "shopt -s extglob; x=$(printf '%20000s'); y=${x//!(a)b/c}; echo done",
        Duration::from_secs(1),
    );
    assert_eq!(r.reason, shellbox_core::ExitReason::TimedOut, "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

/// Issue 16 finding 6: big buffers end at the timeout (they overshot it by 4 to 9 s, or
/// returned `Exited` after 10 s), and appending to an array is amortized O(1).
#[test]
fn big_buffers_honour_the_timeout() {
    for script in [
        "s=x; while :; do s=$s$s; done",
        "for b in `cat /dev/zero | head -c 100000000`; do :; done",
        "a=(); for i in {1..1000000}; do a+=($i); done",
        "x=$(printf '%100000000s'); while :; do y=${x//a/b}; done",
        // one tick per 64 KiB written, the clock looked at every 256 ticks: 16 MiB of
        // formatted numbers between two looks (the 5-minute fuzz run, seed 424242 case 884)
        "seq -f %g 9223372036854775807 > /dev/null",
        // one s///g over a long line makes millions of matches
        "x=$(printf '%4000000s'); while :; do echo \"$x\" | sed 's/x*/-/g' > /dev/null; done",
        "awk 'BEGIN { while (1) x++ }'",
    ] {
        let m = SimMachineFactory::new()
            .create_sim(MachineSpec::sim())
            .unwrap();
        let started = std::time::Instant::now();
        match m.run_sync(Command::shell(script).timeout(Duration::from_secs(1))) {
            Ok(r) => {
                assert_no_panic(script, &r);
                assert_eq!(
                    r.reason,
                    shellbox_core::ExitReason::TimedOut,
                    "{script}: {r:?}"
                );
            }
            // the doubling loop may reach the memory budget first
            Err(shellbox_core::Error::Terminated(why)) if script.starts_with("s=x") => {
                assert!(why.contains("memory"), "{why}")
            }
            Err(e) => panic!("{script}: {e}"),
        }
        // within 3 s of the 1 s timeout (a generous bound for an unoptimised build on a
        // busy machine; the interpreter looks at the clock at least once per MiB)
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{script}: {:?}",
            started.elapsed()
        );
    }
    let r = run_with_timeout(
        "a=(); for i in {1..100000}; do a+=($i); done; echo ${#a[@]} ${a[99999]}",
        Duration::from_secs(60),
    );
    assert_eq!(r.stdout, "100000 100000\n", "{r:?}");
}

/// Found by the fuzzer: array subscripts at the ends of i64 never overflow.
#[test]
fn extreme_array_subscripts() {
    let r = run_with_timeout(
        "a=(1 2); : $((a[-9223372036854775808] /= 255)); echo ${a[-9223372036854775808]}; b[9223372036854775807]=x; b+=(y); echo ${#b[@]}; read -a c <<< 'p q'; echo ${c[-9223372036854775808]}; echo end",
        Duration::from_secs(10),
    );
    assert_no_panic("subscripts", &r);
    assert!(r.stdout.ends_with(b"end\n"), "{r:?}");
}

/// A timeout that fires inside a step that reports failure instead of unwinding (a test
/// operand, an array subscript) still ends the command: once the deadline passed, every
/// later tick fires it again (the long fuzz run found a script running minutes past it).
#[test]
fn a_swallowed_timeout_fires_again() {
    for script in [
        "until [[ $(while :; do :; done) == x ]]; do :; done",
        "while :; do a[$(while :; do :; done)]=1; done",
        "until test $(while :; do :; done) -eq 1 2>/dev/null; do :; done",
    ] {
        let started = std::time::Instant::now();
        let r = run_with_timeout(script, Duration::from_millis(300));
        assert_no_panic(script, &r);
        assert_eq!(
            r.reason,
            shellbox_core::ExitReason::TimedOut,
            "{script}: {r:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{script}: {:?}",
            started.elapsed()
        );
    }
}

/// awk's user functions recurse to a bound (a run-time error), never past the host's stack.
#[test]
fn awk_recursion_is_bounded() {
    let r = run_with_timeout(
        "awk 'function f(n) { return n ? f(n - 1) : 0 } BEGIN { print f(100000) }'; echo rc=$?; \
         awk 'function g(n) { return n ? g(n - 1) + 1 : 0 } BEGIN { print g(500) }'",
        Duration::from_secs(60),
    );
    assert_no_panic("awk recursion", &r);
    assert_eq!(String::from_utf8_lossy(&r.stdout), "rc=2\n500\n", "{r:?}");
}

/// `wc` over a big file looks at the clock as it counts: counting 300 MB (about 1.5 s of
/// work) under a 200 ms timeout times out, where it used to run to the end and exit 0
/// (issue 8's break-it pass: `head -c 300000000 /dev/zero | wc -c` under `--timeout 2s`).
#[test]
fn wc_of_a_big_file_ends_at_its_deadline() {
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap();
    let r = m
        .run_sync(Command::shell("head -c 300000000 /dev/zero > /big"))
        .unwrap();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    for script in ["wc /big", "cat /big | wc -w"] {
        let r = m
            .run_sync(Command::shell(script).timeout(Duration::from_millis(200)))
            .unwrap();
        assert_eq!(
            r.reason,
            shellbox_core::ExitReason::TimedOut,
            "{script}: {r:?}"
        );
    }
}

/// `${x@Q}` quotes a big value one piece at a time, looking at the clock between pieces
/// (the fuzz hour run, seed 20261201, case 16556: `n+="${n@Q}"` in a loop quoted 12 MiB
/// into 48 MiB in one step, 200 ms of CPU past a 200 ms deadline; the fuzz corpus holds
/// the case): the pieces join into the same text as quoting it whole, for plain text,
/// text with control characters (`$'...'`) and multibyte characters across the 1 MiB
/// piece boundaries.
#[test]
fn quoting_a_big_value_in_pieces_gives_the_same_text() {
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap();
    // (the value as `$'...'` text, doublings, its quoted form, the quoting's opening)
    for (unit, doublings, want_unit, open) in [
        (r"\'", 21, r"'\''", "'"),
        (r"\t\'", 20, r"\t\'", "$'"),
        (r"é\'x", 19, r"é'\''x", "'"),
    ] {
        let script = format!(
            "x=$'{unit}'; for i in $(seq {doublings}); do x=$x$x; done; printf %s \"${{x@Q}}\""
        );
        let r = m
            .run_sync(Command::shell(script).output_limit_bytes(64 << 20))
            .unwrap();
        let want = format!("{open}{}'", want_unit.repeat(1 << doublings));
        assert!(
            r.stdout == want.as_bytes(),
            "{unit:?}: {} bytes, want {}; starts {:?}",
            r.stdout.len(),
            want.len(),
            String::from_utf8_lossy(&r.stdout[..r.stdout.len().min(40)])
        );
    }
}

/// Runs `setup` (no timeout, `stdin` its input), then `script` under a 1 s timeout (with
/// `env` added) on the same machine, and
/// asserts the script timed out within `HANG` of its start: `setup` builds the big input
/// the script then works on (files persist between commands), so the script reaches its
/// costly step however slow the build is.
fn assert_ends_at_deadline(env: &[(&str, String)], setup: &str, stdin: &str, script: &str) {
    /// A bound against hangs only (an unoptimised build on a busy machine); the 100 ms
    /// property is the release fuzz target's, whose corpus holds these cases.
    const HANG: Duration = Duration::from_secs(10);
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap();
    let r = m
        .run_sync(Command::shell(setup).stdin(stdin.to_string()))
        .unwrap_or_else(|e| panic!("{setup:?}: {e}"));
    assert_eq!(r.exit_code, Some(0), "{setup:?}: {r:?}");
    let mut cmd = Command::shell(script).timeout(Duration::from_secs(1));
    for (k, v) in env {
        cmd = cmd.env(*k, v.as_str());
    }
    let started = std::time::Instant::now();
    let r = m
        .run_sync(cmd)
        .unwrap_or_else(|e| panic!("{script:?}: {e}"));
    let took = started.elapsed();
    assert_no_panic(script, &r);
    assert_eq!(
        r.reason,
        shellbox_core::ExitReason::TimedOut,
        "{script:?}: {r:?}"
    );
    assert!(took < HANG, "{script:?}: {took:?} under a 1 s timeout");
}

/// Issue 16, the fuzz hour run (seed 20261201, case 57334): PATH grown to about 60 MB by
/// string doubling, then programs run in a loop. Each launch copied PATH and walked its
/// directories without looking at the clock (116 ms of CPU past a 200 ms deadline); a
/// name not on a PATH of 2 million directories took 4.5 s (release) past the deadline.
/// The lookup now reads PATH in place and looks at the clock every 64 directories, for a
/// command, `hash`, `type`, `command -v` and the programs xargs runs.
///
/// Such a PATH is grown in the script: as a command's environment it is `InvalidInput` on
/// every backend (a string over Linux's MAX_ARG_STRLEN, which no exec takes).
#[test]
fn a_long_path_ends_at_its_deadline() {
    let path = vec!["/bin"; 1 << 21].join(":");
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap();
    let e = m
        .run_sync(Command::shell("nope").env("PATH", path))
        .unwrap_err();
    assert!(matches!(e, shellbox_core::Error::InvalidInput(_)), "{e:?}");
    let grow = "PATH=/bin; for i in {1..21}; do PATH+=\":$PATH\"; done; ";
    assert_ends_at_deadline(&[], ":", "", &format!("{grow}while :; do nope; done"));
    assert_ends_at_deadline(
        &[],
        ":",
        "",
        &format!("{grow}while :; do hash nope; type nope; command -v nope; done"),
    );
    assert_ends_at_deadline(
        &[],
        "seq 100000 > /in",
        "",
        &format!("{grow}/bin/xargs -n1 nope < /in"),
    );
    // the same PATH grown in the script, as the fuzz case grew it
    assert_ends_at_deadline(
        &[],
        ":",
        "",
        "PATH=/bin; for i in {1..21}; do PATH+=\":$PATH\"; done; while :; do nope; done",
    );
}

/// A long IFS (found looking for the same pattern as issue 16's case 57334): word
/// splitting and `read` looked each character of their text up in the whole IFS, so
/// 100,000 characters against a 100,000-character IFS ran 14 s past a 200 ms deadline.
/// IFS is now a set of its characters, made in pieces that look at the clock.
#[test]
fn a_long_ifs_ends_at_its_deadline() {
    let setup = "printf '%100000s' | tr ' ' x > /ifs; printf '%100000s' | tr ' ' y > /text";
    assert_ends_at_deadline(
        &[],
        setup,
        "",
        "IFS=$(cat /ifs); x=$(cat /text); while :; do : $x; done",
    );
    assert_ends_at_deadline(
        &[],
        setup,
        "",
        "IFS=$(cat /ifs); x=$(cat /text); while :; do read -r a b <<< \"$x\"; done",
    );
}

/// A script of megabytes (eval of a grown string, `bash -c`, `source`, a script file):
/// brush-parser tokenizes and parses its whole input in one step, half a second per
/// megabyte, so a 4 MB eval ran 2-3 s (release) past a 200 ms deadline. A long script is
/// now parsed and run a piece of complete commands at a time, as bash reads it, and the
/// parser's reading looks at the clock every 16 KiB.
#[test]
fn a_big_script_ends_at_its_deadline() {
    let script = "echo a\n".repeat(4_000_000 / 7);
    for run in [
        "eval \"$(cat /s.sh)\"",
        "bash -c \"$(cat /s.sh)\"",
        ". /s.sh",
        "/s.sh",
        "bash < /s.sh",
    ] {
        assert_ends_at_deadline(&[], "cat > /s.sh; chmod +x /s.sh", &script, run);
    }
}

/// A script longer than a parse piece (16 KiB) runs as the whole would: commands that
/// span piece boundaries (here-documents, compound commands, functions, continued lines,
/// multi-line quotes) run whole, in order, the status is the last command's, a trailing
/// piece of comments keeps it, and a syntax error still ends the script with status 2
/// after what precedes it ran.
#[test]
fn a_long_script_runs_as_the_whole_would() {
    let unit = "n=$((n + 1))\n\
                cat <<EOF\nh$n\nline two\nEOF\n\
                if [ $((n % 2)) = 0 ]; then\n  echo even$n\nelse\n  echo odd$n\nfi\n\
                f() {\n  echo \"f$1\"\n}\n\
                f \\\n  $n\n\
                echo 'multi\nline'\n\
                for i in 1 2; do\n  echo -n $i\ndone; echo\n\
                # a comment with a quote ' in it\n";
    let want_unit = |n: usize| {
        let parity = if n.is_multiple_of(2) { "even" } else { "odd" };
        format!("h{n}\nline two\n{parity}{n}\nf{n}\nmulti\nline\n12\n")
    };
    let copies = 400;
    let script = unit.repeat(copies);
    assert!(script.len() > 4 * 16 * 1024, "{}", script.len());
    let want: String = (1..=copies).map(want_unit).collect();
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap();
    let r = m
        .run_sync(Command::shell("cat > /s.sh").stdin(script.clone()))
        .unwrap();
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    for run in ["bash /s.sh", ". /s.sh", "eval \"$(cat /s.sh)\""] {
        let r = m
            .run_sync(Command::shell(run).output_limit_bytes(16 << 20))
            .unwrap();
        assert_eq!(
            r.exit_code,
            Some(0),
            "{run}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(r.stdout == want.as_bytes(), "{run}: stdout differs");
    }
    // the status is the last command's, through a trailing piece of comments
    let tail = "#\n".repeat(20 * 1024);
    let r = m
        .run_sync(Command::shell(format!(
            "{}false\n{tail}",
            ":\n".repeat(10 * 1024)
        )))
        .unwrap();
    assert_eq!(r.exit_code, Some(1), "{r:?}");
    // a syntax error after 20 KiB of commands: they ran, then status 2
    let r = m
        .run_sync(Command::shell(format!(
            "{}echo before\n)\necho after\n",
            ":\n".repeat(10 * 1024)
        )))
        .unwrap();
    assert_eq!(r.exit_code, Some(2), "{r:?}");
    assert_eq!(r.stdout, "before\n", "{r:?}");
}

/// IFS as a set: a long IFS of multibyte characters splits as the short one would.
#[test]
fn a_long_ifs_splits_as_a_short_one() {
    let r = run_with_timeout(
        "IFS=$(printf 'é%.0s' {1..5000})x; v='aébxc'; set -- $v; echo $# $1 $2 $3; \
         read -r p q r <<< \"$v\"; echo $p $q $r; IFS=; set -- $v; echo $#",
        Duration::from_secs(60),
    );
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "3 a b c\na b c\n1\n",
        "{r:?}"
    );
}

/// A child shell gets the exported variables and only those, whether most of the parent's
/// variables are exported (it starts from a shared copy less the others) or few are (it
/// starts empty and copies those).
#[test]
fn a_child_shell_gets_the_exported_variables() {
    for script in [
        "for i in {1..3000}; do export e$i=$i; done; u=1; bash -c 'echo $e2999 ${u-unset} $SHLVL'",
        "for i in {1..3000}; do v$i=1; done; export e=5; bash -c 'echo $e ${v1-unset} $SHLVL'",
    ] {
        let r = run_with_timeout(script, Duration::from_secs(60));
        let out = String::from_utf8_lossy(&r.stdout);
        let want = if script.contains("e2999") {
            "2999 unset 2\n"
        } else {
            "5 unset 2\n"
        };
        assert_eq!(out, want, "{script}: {r:?}");
    }
}

/// Operator chains just below the simulator's bound (1,024 operators) parse and evaluate
/// on an ordinary thread's stack, as bash evaluates them; past it the expression is an
/// arithmetic error (which, as in bash, ends the rest of the line), not a crash.
#[test]
fn long_arithmetic_chains_below_the_bound_work() {
    let f = SimMachineFactory::new();
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let script = "a=$(printf '%.0s!' $(seq 1022))1; b=$(printf '%.0s1+' $(seq 1023))1; \
                  echo $((a)) $((b)); (( b == 1024 )) && echo ok; c=$(printf '%.0s!' $(seq 3000))1; \
                  echo $((c)); echo not reached";
    let r = m.run_sync(Command::shell(script)).unwrap();
    assert_eq!(
        (r.exit_code, &r.stdout[..]),
        (Some(1), &b"1 1024\nok\n"[..]),
        "{r:?}"
    );
}

/// Long `&&` lists outside `[[ ]]` and `[[ ]]` expressions of a few operators still run.
#[test]
fn long_lists_and_short_tests_still_run() {
    let f = SimMachineFactory::new();
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let script = format!(
        "true{} && echo list; [[ a && ! -z a || b ]] && echo test; [[ a{} ]] && echo chain",
        " && true".repeat(5000),
        " && a".repeat(150)
    );
    let r = m.run_sync(Command::shell(script.as_str())).unwrap();
    assert_eq!(
        (r.exit_code, &r.stdout[..]),
        (Some(0), &b"list\ntest\nchain\n"[..]),
        "{r:?}"
    );
}

/// `bc` computes in pieces that look at the clock: `2^10000000` (3 million digits; GNU bc
/// runs for minutes) and an endless loop end at a 1 s timeout, and a number past the memory
/// budget ends the machine with the budget's error instead of being built.
#[test]
fn bc_ends_at_its_deadline_and_budget() {
    for script in [
        "echo '2^10000000' | bc",
        "echo 'while (1) x++' | bc",
        "echo 'scale=100000; 4*a(1)' | bc -l",
        "echo 'define f(n) { if (n) return f(n-1); return 0; }; while (1) f(9000)' | bc",
    ] {
        assert_ends_at_deadline(&[], "true", "", script);
    }
    let f = SimMachineFactory::with_options(shellbox_sim::SimOptions {
        memory_bytes: Some(64 << 20),
        ..shellbox_sim::SimOptions::default()
    });
    for script in [
        "echo '2^(2^40)' | bc",
        "echo 'x = 2^1000000; while (1) x *= x' | bc",
    ] {
        let m = f.create_sim(MachineSpec::sim()).unwrap();
        match m.run_sync(Command::shell(script).timeout(Duration::from_secs(60))) {
            Err(shellbox_core::Error::Terminated(why)) => {
                assert!(why.contains("memory limit exceeded"), "{script}: {why}")
            }
            r => panic!("{script}: {r:?}"),
        }
    }
}

/// Issue 16, break-it of stop 27: programs that recursed per level of their input
/// overflowed the host's stack and aborted the whole process. `du` and `rm -r` walk a
/// tree of any depth with their own stack; jq reads input nested up to jq 1.6's limit
/// (256) and refuses deeper with jq's error; jq, awk and expr run on a stack of their own
/// and refuse what is past their bound (a filter of more than 10,000 operators, an awk
/// expression of more than 10,000 tokens, expr nesting past 10,000) with the tool's
/// status, never a crash.
#[test]
fn deep_inputs_never_overflow_programs() {
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap();
    let run = |script: &str| {
        let r = m
            .run_sync(Command::shell(script).timeout(Duration::from_secs(120)))
            .unwrap_or_else(|e| panic!("{script}: {e}"));
        assert_no_panic(script, &r);
        r
    };
    // a tree 9,000 levels deep (GNU du and rm walk any depth with fts)
    let r = run("mkdir -p x/$(printf 'd/%.0s' {1..9000}) && du -s x && du x | wc -l && rm -rf x; echo rc=$?; ls");
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "36004\tx\n9001\nrc=0\n",
        "{r:?}"
    );
    // jq 1.6: `parse error: Exceeds depth limit for parsing`, status 4, after the values
    // before it
    let r = run(
        "{ echo 1; printf '%.0s[' {1..10000}; printf '%.0s]' {1..10000}; } > deep; jq -c . deep; echo rc=$?",
    );
    assert_eq!(String::from_utf8_lossy(&r.stdout), "1\nrc=4\n", "{r:?}");
    assert_eq!(
        String::from_utf8_lossy(&r.stderr),
        "parse error: Exceeds depth limit for parsing at line 2, column 257\n"
    );
    let r = run("jq -n \"1$(printf '+1%.0s' {1..9000})\"; jq -n \"1$(printf '+1%.0s' {1..50000})\"; echo rc=$?");
    assert_eq!(String::from_utf8_lossy(&r.stdout), "9001\nrc=3\n", "{r:?}");
    let r = run("awk \"BEGIN { print $(printf '!%.0s' {1..5000})1 }\"; awk \"BEGIN { print 1$(printf '+1%.0s' {1..4000}) }\"; awk \"BEGIN { print 1$(printf '+1%.0s' {1..50000}) }\"; echo rc=$?");
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "1\n4001\nrc=2\n",
        "{r:?}"
    );
    let r = run("expr $(printf '( %.0s' {1..5000}) 1 $(printf ') %.0s' {1..5000}); expr $(printf '( %.0s' {1..20000}) 1 $(printf ') %.0s' {1..20000}); echo rc=$?");
    assert_eq!(String::from_utf8_lossy(&r.stdout), "1\nrc=2\n", "{r:?}");
    let r = run("echo ok");
    assert_eq!(r.stdout, "ok\n");
}

/// Issue 16, break-it of stop 27: `find` stopped silently at 4,096 levels (4,097 entries,
/// status 0); realpath looked each component up from `/` again (90 s for a path 10,000
/// levels deep in an unoptimised build); `ls -R` kept every listed path in a queue and
/// the whole output in one string (1.9 GB for a 30,000-deep tree). Each walks any depth
/// now: find with its own stack, realpath from the parent's inode, ls -R from a stack
/// of pending directories, writing as it goes.
#[test]
fn deep_trees_are_walked_whole() {
    let m = SimMachineFactory::new()
        .create_sim(MachineSpec::sim())
        .unwrap();
    let run = |script: &str| {
        let r = m
            .run_sync(Command::shell(script).timeout(Duration::from_secs(30)))
            .unwrap_or_else(|e| panic!("{script}: {e}"));
        assert_no_panic(script, &r);
        assert_eq!(r.exit_code, Some(0), "{script}: {r:?}");
        String::from_utf8_lossy(&r.stdout).into_owned()
    };
    run("mkdir -p x/$(printf 'd/%.0s' {1..5000})");
    assert_eq!(
        run("find x | wc -l; find x -mindepth 5000 -type d | wc -c"),
        "5001\n10002\n"
    );
    assert_eq!(
        run("ls -R x | wc -l; ls -R x | tail -n 2 | wc -c"),
        "15001\n10004\n"
    );
    assert_eq!(
        run("p=$(printf 'd/%.0s' {1..5000}); realpath x/$p | wc -c; cd x/$p && realpath -e $(printf '../%.0s' {1..4999}) | wc -c; realpath -m ../../q/r | cut -c 1-14,10003-"),
        "10013\n15\n/workspace/x/d/d/d/d/q/r\n"
    );
    run("find x -delete; ls");
    assert_eq!(run("ls"), "");
}

/// Issue 16, break-it of stop 27: `jq -n '"x" * 1000000000'` under a 64 MiB budget
/// printed the whole string (escaping each character: minutes in an unoptimised build)
/// into an uncharged buffer before the budget saw it. A string result is charged before
/// it is printed now, so the machine ends with the memory budget's error at once. (The
/// string itself is built by jaq, outside the meter: bounded by jaq, not by the budget.)
#[test]
fn a_huge_jq_string_meets_the_budget_before_printing() {
    let f = SimMachineFactory::with_options(shellbox_sim::SimOptions {
        memory_bytes: Some(64 << 20),
        ..shellbox_sim::SimOptions::default()
    });
    let m = f.create_sim(MachineSpec::sim()).unwrap();
    let script = "jq -n '\"x\" * 200000000'";
    match m.run_sync(Command::shell(script).timeout(Duration::from_secs(10))) {
        Err(shellbox_core::Error::Terminated(why)) => {
            assert!(why.contains("memory limit exceeded"), "{why}")
        }
        r => panic!("{script}: {r:?}"),
    }
}
