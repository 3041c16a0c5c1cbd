//! Differential tests: the same scripts through the host's real `bash` and the simulator,
//! compared byte for byte (stdout and exit status).

mod common;

const SCRIPTS: &[&str] = &[
    r#"x='a b  c'; set -- $x "$x"; echo $# "$2"; printf '[%s]' "$@"; echo"#,
    r#"f() { local i=$1; (( i <= 1 )) && { echo 1; return; }; echo $(( i * $(f $((i-1))) )); }; f 10"#,
    r#"a=(zero one two three); echo "${a[@]:1:2}" "${#a[@]}" "${!a[@]}"; a+=(x y); echo "${a[*]: -2}""#,
    r#"declare -A m; m[k1]=v1; m[k2]=v2; echo "${m[k1]} ${#m[@]}"; for k in "${!m[@]}"; do echo "$k"; done | wc -l"#,
    r#"s=path/to/file.tar.gz; echo ${s##*/} ${s%%.*} ${s/to/from} ${s//[aeiou]/_} ${s^^} ${#s}"#,
    r#"i=0; out=; while (( i < 200 )); do (( i % 7 == 0 )) && out+="$i,"; ((i++)); done; echo "$out""#,
    r#"printf '%5.2f|%-6s|%04d|%x|%o|%e\n' 3.14159 ab 42 255 8 12345.678; printf '%s-%s\n' a b c"#,
    r#"set -e; trap 'echo "exit $?"' EXIT; f() { false; echo unreachable; }; echo start; f; echo never"#,
    r#"case "$(echo hello)" in h*o) echo glob-ok ;; *) echo no ;; esac; [[ abc == a?c && ! -z x ]] && echo dbl"#,
    r#"mkdir -p d/e; touch d/a.txt d/b.txt d/e/c.txt; echo d/*.txt; ls d; ls -R d; rm -r d; ls"#,
    r#"{ echo one; echo two; } > f; while read -r l; do echo "<$l>"; done < f; wc -l < f; cat -n f; tail -n 1 f"#,
    r#"echo $(( 2**40 )) $(( -17 / 5 )) $(( -17 % 5 )) $(( 1 << 10 )) $(( 0x1F + 010 )) $(( 7 > 3 ? 1 : 0 ))"#,
    r#"x=5; y=${x:+set}; z=${u:-default}; : ${w:=assigned}; echo $y $z $w; echo ${#PATH} > /dev/null"#,
    r#"for i in {1..3}; do for j in a b; do [ $j = b ] && continue; echo $i$j; done; done; echo {a..c}{1,2}"#,
    r#"exec 3>&1; echo to-three >&3; exec 3>&-; echo "$(echo inner; exit 3)" $?; (exit 4); echo $?"#,
    r#"seq 3 | while read n; do echo "n=$n"; done; seq -s, 1 2 9; seq 5 -2 1 | head -n 2"#,
    r#"false | true; echo ${PIPESTATUS[@]}; set -o pipefail; false | true; echo $?"#,
    r#"read -r a b rest <<< "one two three four"; echo "$a|$b|$rest"; IFS=: read -r x y <<< "p:q:r"; echo "$x|$y""#,
    r#"getopts_test() { local OPTIND o; while getopts "ab:c" o; do echo "$o ${OPTARG:-}"; done; shift $((OPTIND-1)); echo "rest $*"; }; getopts_test -a -b val -c x y"#,
    r#"v=$'tab\there'; printf '%q\n' "$v" 'a b' "it's"; echo "${v@Q}""#,
    r#"f() { sleep 0.2; echo bg-done; }; f & echo fg-first; wait; echo end"#,
    r#"for i in 0.3 0.1 0.2; do (sleep $i; echo $i) & done; wait; echo all"#,
    r#"trap 'echo int' INT; trap -p INT; echo $(( 010 + 0x10 + 2#11 )); hash"#,
    r#"set -e; trap 'echo "exit $?"' EXIT; readonly R=1; echo set; R=2; echo never"#,
    r#"while :; do echo y; done | head -n 3; echo "${PIPESTATUS[@]}"; seq 10 | head -2; echo "${PIPESTATUS[@]}""#,
    r#"set -o pipefail; seq 100000 | head -1; echo $?; seq 1000 | head -1; echo $?; cat /dev/zero | head -c 3 | wc -c"#,
    r#"trap 'echo ERR' ERR; f() { false; echo in-f; }; f; (false; echo sub); x=$(false); echo end"#,
    r#"printf '#!/bin/bash -e\necho a\nfalse\necho b\n' > s; chmod +x s; ./s; echo rc=$?"#,
    r#"bash -euo pipefail -c 'false | true; echo never'; echo rc=$?; bash -o pipefail -e -c 'echo ok'; bash -ec 'false; echo no'; echo rc=$?"#,
    r#"PATH=$PATH:~/bin; echo ${PATH##*:}; export P2=/a:~/b; echo $P2; x=$(echo a:~); echo $x"#,
    r#"for ((;;)); do echo once; break; done; for ((i=0;;i++)); do (( i > 2 )) && break; echo $i; done"#,
    r#"readonly x=5; f() { local x=6; echo $x; }; f 2>/dev/null; echo $x; mkdir -p d/a d/b; stat -c %h d"#,
    r#"a=(1 2 3); for i in "${!a[@]}"; do echo "$i:${a[$i]} ${a[$i-1]}"; done; j=2; echo "${a[$((j-1))]}" ${a[j]}"#,
    r#"add() { local -n arr=$1; arr+=("$2"); }; list=(a); add list b; echo "${list[@]}"; x=1; declare -n r=x; r=5; (( r++ )); echo $x $r"#,
    r#"declare -A c; for w in the quick brown fox jumps over the lazy dog é; do ((c[$w]++)); done; for k in "${!c[@]}"; do echo "$k ${c[$k]}"; done; declare -p c"#,
    // pattern operations (issue 16 finding 5: compiled once, matched in one pass)
    r#"s=aXbXcXd.tar.gz; echo ${s#*X} ${s##*X} ${s%X*} ${s%%X*} ${s#?} ${s%?} ${s#[a-c]} ${s%.*} ${s%%.*} ${s#"*"} ${s#\a}"#,
    r#"s='a b  c/d//e'; echo "${s// /_}" "${s//\//|}" "${s/b*/Z}" "${s/#a/A}" "${s/%e/E}" "${s/#x/Y}" "${s/%/!}" "${s//?/.}""#,
    // [[ == ]] and case through the pattern DFA (f1a46f3): a trailing lone backslash is
    // literal, extended groups against subjects that need backtracking
    r#"p='a\'; [[ 'a\' == $p ]] && echo m1; [[ a == $p ]] || echo n2; case 'a\' in $p) echo c1;; esac; for s in '' a ab aab ba 'a b' x.txt y.gz; do r=; for p in '+(a|b)' '*(a)b' '!(a*)' '*.@(txt|gz)' 'a+(b|c)' '[!a]*' '*(a|b|" ")'; do [[ $s == $p ]] && r+=1 || r+=0; case $s in $p) r+=1;; *) r+=0;; esac; done; echo "$s:$r"; done"#,
    r#"shopt -s extglob; s=foo.bar.baz; echo ${s%%+(.ba?)} ${s##@(f|o)*(o)} ${s//@(a|ba)/_} ${s/?(x)b/Q} ${s%!(z)} ${s//!(.)/-}"#,
    r#"s='éaé€𝄞b'; echo ${s#?} ${s%?} ${s//é/e} ${s//[[:alpha:]]/_} ${s/€*/} ${#s}; t=aaaa; echo ${t//a/bb} ${t//*(a)/x} ${t/#*/y}"#,
    r#"s=abcabc; echo ${s/[!a]/_} ${s//[!a]/_} ${s//[a-b]} ${s//[]a]/-} ${s/bc*/} ${s//\*/x} ${s%%[c]} ${s##*[[:alpha:]]}"#,
    // lists over 4096 items take the paced paths of `set --`, `shift` (of a list of its
    // own and of one shared with a subshell), function calls and array assignment
    r#"set -- $(seq 10000); shift; echo $# $1; shift 5000; echo $# $1; (shift 10; echo $# $1); echo $# $1; f() { shift 2; echo $# $1 ${10}; }; f "$@"; a=("$@"); a=("${a[@]}"); echo ${#a[@]} ${a[4998]}; set -- $(seq 5000); echo $# ${5000}; a=($(seq 6000)); echo ${#a[@]} ${a[-1]}"#,
];

/// Listings (`declare -p`, `export -p`, `readonly -p`, `local`, `set`, `declare -F`) quote
/// values as bash 5.2 does: `$'...'` for control characters (`\a \b \E \f \n \r \t \v`,
/// other bytes in octal), else double quotes with `\ " $` and `` ` `` escaped; `set` single-
/// quotes values with shell characters; array elements and associative keys alike.
const LISTINGS: &[&str] = &[
    r#"v='a"b'; w=$'a\nb'; t='a$b`c\\d'; u=$'\x01x\a\b\e\f\r\t\v\x7f\'\\'; e=; y=é; declare -p v w t u e y"#,
    r#"v='a"b'; w=$'a\nb'; t='a$b`c\\d!'; export v w t; export -p | grep -E '^declare -x (v|w|t)='; readonly r=$'z\nz' s=q; readonly -p | grep -E ' (r|s)='"#,
    r#"a=(x $'a\nb' 'q"r' '$`\' '' $'\t' é "it's" '#~'); declare -p a; declare -ai ai=(1 2); declare -p ai; declare -ar ar=(z); declare -p ar"#,
    r#"declare -A m=(['x y']='q"'); declare -p m; declare -A n=([$'n\nl']=$'a\nb'); declare -p n; declare -A o=(['#h']=2); declare -p o; declare -A p=([k]=v); declare -p p"#,
    r#"x='a b'; y=plain; z=$'c\nd'; q="it's"; t='~a'; u='a~b'; h='#x'; g='a#x'; e=; a=(1 'b c' $'\n'); set | grep -aE '^(x|y|z|q|t|u|h|g|e|a)='"#,
    r#"f() { local l=$'1\n' ll; local m='2"'; local; }; f; g() { local; }; g"#,
    r#"x=1; declare -n r=x; declare -p r; f() { :; }; g() { :; }; declare -F"#,
    r#"printf '%q\n' $'\x01\a\e\x7f' "it's"; v=$'\b\f\v'; echo "${v@Q}""#,
];

#[test]
fn listings_match_real_bash() {
    if !common::has_bash5() {
        eprintln!("SKIP listings_match_real_bash: no bash 5 on this host");
        return;
    }
    let failures: Vec<String> = LISTINGS
        .iter()
        .map(|script| (script, common::run_both(script)))
        .filter(|(_, c)| !c.same())
        .map(|(script, c)| c.describe(script))
        .collect();
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn scripts_match_real_bash() {
    if !common::has_bash5() {
        eprintln!("SKIP scripts_match_real_bash: no bash 5 on this host");
        return;
    }
    let mut failures = Vec::new();
    for script in SCRIPTS {
        let compared = common::run_both(script);
        if !compared.same() {
            failures.push(compared.describe(script));
        }
    }
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The first line number in `err` ("line 3001: ..." from bash, "at line 3001 col 1" from
/// the simulator's parser).
fn line_named(err: &str) -> Option<usize> {
    let at = err.find("line ")? + "line ".len();
    let digits: String = err[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A syntax error in a script longer than a parse piece (16 KiB; the simulator parses a
/// long script a piece at a time) names the line bash names, counted from the script's
/// start, not from its piece's; what precedes the error runs, as in bash.
#[test]
fn a_syntax_error_in_a_long_script_names_bash_s_line() {
    if !common::has_bash5() {
        eprintln!("SKIP a_syntax_error_in_a_long_script_names_bash_s_line: no bash 5 on this host");
        return;
    }
    let a = |n: usize| "echo a\n".repeat(n);
    for script in [
        format!("{}fi\necho after\n", a(3000)),
        format!("{}echo )\necho after\n", a(5000)),
        // a compound command across the first piece's end: the piece grows until it holds
        // the error
        format!("{}if true; then\n{}echo )\nfi\n", a(2300), a(100)),
    ] {
        let real = std::process::Command::new("bash")
            .args(["--norc", "--noprofile", "-c", &script])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let m = shellbox_sim::SimMachineFactory::new()
            .create_sim(shellbox_core::MachineSpec::sim())
            .unwrap();
        let sim = m
            .run_sync(shellbox_core::Command::from_argv(["bash", "-c", &script]))
            .unwrap();
        let (real_err, sim_err) = (
            String::from_utf8_lossy(&real.stderr),
            String::from_utf8_lossy(&sim.stderr),
        );
        let want = line_named(&real_err);
        assert!(want.is_some_and(|l| l > 2000), "bash: {real_err}");
        assert_eq!(line_named(&sim_err), want, "bash: {real_err}sim: {sim_err}");
        assert_eq!(sim.exit_code, real.status.code(), "{sim_err}");
        assert!(sim.stdout == real.stdout, "stdout differs; sim: {sim_err}");
    }
}
