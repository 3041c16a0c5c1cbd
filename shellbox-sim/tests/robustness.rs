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
