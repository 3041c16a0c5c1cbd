//! The text and file tools of the command table against the host's real ones, run in the
//! test itself: each case is a small script (it makes its own input files with printf),
//! run by the host's bash in an empty temporary directory with the real GNU grep 3.8,
//! coreutils 9.1 sort, … on PATH, and by the simulator in an empty `/work`; stdout bytes
//! and the exit status must be equal. A case needs one tool; when the host lacks it (or
//! has another version), its group prints one `SKIP` line. Every group here uses tools of
//! Debian's base system (grep, coreutils, findutils), so CI never skips; a group for a
//! tool outside it (`mawk`, `jq`, `bc`) must add its install to a `scripts/setup-*` script.

use shellbox_core::{Command, MachineSpec};
use shellbox_sim::SimMachineFactory;

const GREP: &[&str] = &[
    "printf 'foo one\\nbar two\\nFoo three\\nbaz foo\\n' > f; grep foo f; grep -i foo f; grep -v foo f; grep -c foo f; grep -n bar f",
    "printf 'id=12 x=345\\nthis is it\\nexact line\\n' > f; grep -Eo '[0-9]+' f; grep -w is f; grep -x 'exact line' f; grep -E 'x=[0-9]{3}' f",
    "printf 'a\\nb\\n' > f; grep zzz f; echo rc=$?; grep a nofile; echo rc=$?; grep -s a nofile f; echo rc=$?",
    "printf 'a\\nb\\n' > f; grep -q a f nofile; echo rc=$?; grep -q z f; echo rc=$?",
    "mkdir -p d/e; echo 'TODO a' > d/1.txt; echo none > d/2.txt; echo 'TODO b' > d/e/3.txt; echo TODO > d/x.md; grep -r TODO d | sort; grep -rl TODO d | sort; grep -rc TODO d | sort; grep -rL TODO d; grep -r --include='*.txt' -h TODO . | sort; grep -r --exclude='*.txt' TODO .; grep -r --exclude-dir=e TODO d | sort; cd d; grep -r TODO | sort",
    "mkdir d; grep x d; echo rc=$?",
    "seq 1 20 > n; grep -A1 -B1 5 n; echo ==; grep -C1 9 n; echo ==; grep -A1 -e 2 -e 6 n; echo ==; grep -n -C2 1 n; grep -B3 -m2 1 n; grep -2 12 n",
    "printf 'abc123\\nxyz\\n42\\nA1\\n' > f; grep '[[:digit:]]' f; grep -c '^[[:alpha:]]*$' f; grep -o '[a-z]' f; grep -m1 '[0-9]' f; grep -l abc f; grep -L abc f; grep -H x f; grep -hn 4 f f",
    "printf 'ab abc abcd\\nxab\\n' > f; grep -ow 'ab' f; grep -w 'ab.' f; grep -o 'b*' f; grep -oE 'ab|abc' f; grep -E 'a|x' f; grep 'ab\\|xa' f; grep -c 'a\\(b\\)\\{1,\\}c' f",
    "printf 'a.b\\naxb\\n[x]\\n*star\\n' > f; grep -F a.b f; grep 'a.b' f; grep -F '[x]' f; grep '*star' f; grep -E 'a\\.b' f; grep '\\[x\\]' f; grep -e a -e star f",
    "printf 'one\\ntwo\\n' | grep -n o; printf 'one\\ntwo\\n' | grep -c -v o; printf 'x\\n' | grep -H x; printf 'x\\n' | grep --label=in -H x",
    "printf 'ab\\n' > f; grep '[' f; echo rc=$?; grep -E 'a{1' f; echo rc=$?; grep 'a\\{1' f; echo rc=$?; grep -k a f; echo rc=$?; grep; echo rc=$?; grep -A x a f; echo rc=$?",
    "printf 'Hello\\nhello\\nHELLO\\n' > f; grep -i hello f | wc -l; grep -vi hello f; echo rc=$?; grep -y HELLO f; grep --ignore-case -c hello f",
    "printf 'a\\0b\\n' > bin; grep a bin; echo rc=$?; grep -c a bin; grep -a a bin | tr '\\0' @",
    "printf 'p1\\nq2\\n' > pats; printf 'xp1\\nq\\nq2\\n' > f; grep -f pats f; grep -F -x -f pats f; grep -E 'p[0-9]$' f; egrep 'q|x' f; fgrep p1 f",
    "printf 'a1\\0b2\\0' | grep -z a | tr '\\0' @; seq 1 30 | grep -c 1; seq 100 | grep -e 5 -e 7 | wc -l",
    // a pattern list over 4 KiB is compiled in pieces and matched as their union
    // (leftmost, then longest, across the pieces)
    "seq 1000 3000 > pats; printf '1234567\\nx1500y\\n999\\n29991\\nab2000cd2001\\nA1001\\n' > f; grep -f pats f; grep -o -f pats f; grep -c -f pats f; grep -x -f pats f; grep -w -f pats f; grep -F -o -f pats f; grep -v -f pats f; grep -n -i -o -f pats f",
    // inputs of 16 KiB and more are searched whole for plain strings: regexes (over a
    // newline, empty matches, buffer anchors), context, -m, -v, -w, -o must not change
    "seq 1 30000 > n; grep -c '9[^0-9]1' n; grep -c '[^5]5' n; grep -n '^1.*9$' n | tail -3; grep -c '\\s7' n; grep -v -c 7 n; grep -c '^$' n; grep -c 'x*' n; grep -B2 -A1 -m3 99 n; grep -c '\\`1' n; grep -c \"3\\\\'\" n; grep -ic 'A\\|77' n; grep -x -c '1[0-9]*' n; grep -c -E '^(12|3)4' n; grep -n -B1 -A2 29999 n; printf '\\n\\nx\\n' >> n; grep -c '^$' n; grep -n '^x$' n; grep -c -v '^' n; grep -c '9$' n; grep -c 99 n; grep -n -B1 -A1 -m2 2999 n; grep -v -c 1 n; grep -F -c -e 9- -e 12 n; grep -c -i 'X' n; grep -w -c 300 n; grep -o 777 n | wc -l; grep -q 29999 n; echo q=$?",
    "printf 'tab\\there\\n  sp\\n' > f; grep -P '\\t' f; grep '[[:space:]]sp' f; grep -E '^\\s+' f; grep '\\<sp\\>' f; grep 'e\\b' f",
];

const SORT: &[&str] = &[
    "printf '10\\n9\\n100\\n1\\n' > n; sort n; sort -n n; sort -rn n; sort -r n",
    "printf 'b 2\\na 3\\nc 1\\n' | sort -k2 -n; printf 'x,3\\ny,1\\nz,2\\n' | sort -t, -k2,2n; printf 'b\\nB\\na\\nA\\n' | sort; printf 'b\\nB\\na\\nA\\n' | sort -f",
    "printf 'b\\na\\nb\\nc\\na\\nb\\n' > w; sort w | uniq -c | sort -rn; sort -u w; sort -ru w",
    "printf '1.5\\n-2\\n 3\\n-0\\n0\\n1e2\\nabc\\n-1.25\\n.5\\n' > n; sort -n n; echo; sort -g n; echo; sort -rn n",
    "printf '2K\\n1M\\n512\\n3G\\n1k\\n-1K\\n' | sort -h; printf 'feb\\nJan\\nxx\\nDEC\\n' | sort -M",
    "printf 'v1.10\\nv1.2\\nv1.9\\nv10.0\\nv1.2a\\n' | sort -V; printf 'a-1.0.tar\\na-1.0~rc1.tar\\na\\n' | sort -V",
    "printf 'a 2 x\\nb 1 y\\nc 2 a\\nd 1 b\\n' > f; sort -k2,2 -k3 f; sort -k2,2n -s f; sort -k2,2r -k1,1 f; sort -k2n,2 -k3r f; sort -t ' ' -k3.1,3.1 f",
    "printf '  b\\n a\\nc\\n' > f; sort f | tr ' ' _; sort -b f; sort -k1b,1 f",
    "printf 'b\\na\\n' > f; sort -c f; echo rc=$?; sort -C f; echo rc=$?; sort f | sort -c; echo rc=$?; sort -o out f; cat out; sort -o f f; cat f",
    "sort nofile; echo rc=$?; sort -k0 /dev/null; echo rc=$?; sort -t ab /dev/null; echo rc=$?; sort -x; echo rc=$?; sort -k1.0 /dev/null; echo rc=$?",
    "printf 'b\\0a\\0' | sort -z | tr '\\0' @; printf 'x\\ny' | sort; printf '' | sort; echo end",
    "printf 'a:3:z\\nb:10:y\\nc:2:x\\n' | sort -t: -k2n; printf 'a:3:z\\nb:10:y\\nc:2:x\\n' | sort -t: -k3; printf 'B\\na\\nC\\n' | sort -fr; printf 'x!a\\nxa\\nx b\\n' | sort -d",
    "seq 1 10000 | sort -rn | head -3; seq 1 5000 | sort | tail -2",
];

const XARGS: &[&str] = &[
    "printf 'a\\nb\\nc\\n' | xargs echo; printf 'a\\nb\\nc\\n' | xargs -n1 echo item; printf '1\\n2\\n' | xargs -I{} echo 'n={}'; echo 'x y z' | xargs -n 2; printf '' | xargs -r echo never; echo rc=$?",
    "printf '' | xargs echo empty; printf 'a b\\nc\\n' | xargs -L1 echo L; printf \"'a b' \\\"c d\\\" e\\\\ f\\n\" | xargs -n1; printf 'a\\0b c\\0' | xargs -0 -n1 echo",
    "printf 'x,y,z' | xargs -d, -n2 echo; printf 'a\\n' | xargs false; echo rc=$?; printf 'a\\n' | xargs nosuchcmd; echo rc=$?; printf 'a\\n' | xargs sh -c 'exit 255'; echo rc=$?",
    "printf 'a\\n' | xargs -n 0 echo; echo rc=$?; printf 'a\\n' | xargs -n x echo; echo rc=$?; printf \"'a\\n\" | xargs echo; echo rc=$?; printf '  sp\\n' | xargs -I% echo [%]; printf 'a b\\nSTOP\\nc\\n' | xargs -E STOP echo",
    "mkdir d; touch d/1 d/2; printf 'd/1\\nd/2\\n' | xargs rm; ls d | wc -l; printf 'a\\nb\\n' | xargs -t -n1 echo 2>/dev/null",
];

const MISC: &[&str] = &[
    "export MYVAR=hello; printenv MYVAR; env -u MYVAR printenv MYVAR; echo rc=$?; printenv MYVAR NOPE MYVAR; echo rc=$?; printenv -x; echo rc=$?; printenv | grep -c '^MYVAR=hello$'",
    "yes | head -n 3; yes x y | head -2; yes | head -c 5 | wc -c; yes abc | head -1000 | sort -u",
];

const FIND: &[&str] = &[
    "mkdir d; echo a > d/x; echo bb > d/y; find d -type f -exec cat {} \\; | sort; find d -type f -exec echo {} + | tr ' ' '\\n' | sort; find d -name x -exec sh -c 'echo \"found $1\"' _ {} \\;",
    "mkdir -p keep skip; touch a.tmp b.tmp c.txt keep/k.tmp skip/s.tmp; find . -path ./skip -prune -o -name '*.tmp' -print | sort; find . -name '*.tmp' -delete; find . -type f | sort; find . -empty -type d | sort",
    "mkdir -p a/b/c; touch a/1 a/b/2 a/b/c/3; find a | sort; find a -maxdepth 1 | sort; find a -mindepth 2 -type f | sort; find a -type d | sort; find a ! -type d | sort; find a -not -name '*2' -type f | sort",
    "mkdir -p a/B; touch a/x.TXT a/y.txt; find a -iname '*.txt' | sort; find a -name '*.txt'; find a -path '*B*'; find a -regex '.*y\\.txt'; find . -name nothing; echo rc=$?",
    "find nosuch; echo rc=$?; find . -bogus; echo rc=$?; find . -type q; echo rc=$?; find . -maxdepth x; echo rc=$?; find . -name; echo rc=$?",
    "mkdir d; printf 12345 > d/f; touch d/e; find d -size +2c | sort; find d -size -1 | sort; find d -empty; find d -type f -printf '%f %s %p %h %d\\n' | sort; find d -print0 | tr '\\0' '\\n' | sort",
    "mkdir d; touch d/a; chmod 755 d/a; touch d/b; find d -perm 755; find d -perm -700 | sort; find d -type f -perm /111; find d -name a -o -name b | sort; find d \\( -name a -o -name b \\) -print | sort; find d -name a -quit",
    "mkdir -p d/e; touch d/e/f; cd d; find . -name f -execdir sh -c 'echo $0 $(ls)' {} \\;; find -name f; find . -type f -printf '%P\\n'",
];

const NL_PASTE: &[&str] = &[
    "printf 'a\\n\\nb\\n' | nl; printf 'a\\n\\nb\\n' | nl -ba -w3 -s: -nrz; printf 'a\\nb' | nl -nln; printf 'x\\ny\\n' | nl -v 10 -i 5 -s ' '; printf 'x\\n' | nl -bn",
    "printf 'a\\nb\\n' > f; nl f f; nl nofile; echo rc=$?; nl -x f; echo rc=$?; nl -b q f; echo rc=$?; nl -w 0 f; echo rc=$?",
    "printf '1\\n2\\n3\\n' | paste - -; printf 'a\\nb' | paste -s -d,; printf 'a\\nb\\nc\\n' | paste -sd ',;'; printf '1\\n2\\n' > x; printf 'a\\nb\\nc\\n' > y; paste x y; paste -d: x y x; paste -s x y",
    "printf '1\\n2\\n' > x; paste x nofile; echo rc=$?; paste -d '\\t|' x x x; paste -d '' x x; printf 'a\\nb\\nc\\nd\\ne\\n' | paste - - -; paste -q x; echo rc=$?",
    // standard input shared by several `-` among files, unterminated last lines, empty inputs
    "printf '1\\n2\\n' > x; printf 'a\\nb\\nc\\nd\\ne' | paste - x -; printf '' | paste - x; printf 'p\\nq' > y; paste -s -d, x - y < y; paste -s - - < x; : > e; paste e e; paste -s e x; printf 'a\\0b\\0' | paste -z - - | tr '\\0' @",
];

const EXPR: &[&str] = &[
    "expr 3 + 4; expr 10 / 3; expr 10 % 3; expr 5 \\> 3; x=$(expr 2 \\* 21); echo $x; expr length hello; expr 1 = 2; echo rc=$?; expr -7 / 2; expr -7 % 2; expr 01 = 1; expr 10 \\< 9; expr a \\< b; expr abc != abd",
    "expr abc : 'a\\(b\\)'; expr abc : 'ab'; expr abc : 'x'; echo rc=$?; expr abc : 'x\\(y\\)'; echo rc=$?; expr substr hello 2 3; expr substr hello 9 1; echo rc=$?; expr index hello l; expr match abc 'a.'; expr 'a.b' : '.*\\.\\(.*\\)'",
    "expr 0 \\| ''; echo rc=$?; expr 3 \\& 0; echo rc=$?; expr '' \\| 7; expr 2 \\| 3; expr 2 \\& 3; expr -- -5 + 1; expr \\( 1 + 2 \\) \\* 3; expr + length; expr length + length; expr 0; echo rc=$?; expr -0; echo rc=$?; expr 00; echo rc=$?",
    "expr; echo rc=$?; expr 1 +; echo rc=$?; expr a + 1; echo rc=$?; expr 5 / 0; echo rc=$?; expr 1 2; echo rc=$?; expr \\( 1; echo rc=$?; expr \\); echo rc=$?; expr a : '\\('; echo rc=$?; expr 5 % 0; echo rc=$?",
];

const SED: &[&str] = &[
    "echo 'hello world world' | sed 's/world/there/'; echo 'hello world world' | sed 's/world/there/g'; echo abc | sed 's/b/[&]/'; echo 'key=value' | sed 's/\\(.*\\)=\\(.*\\)/\\2=\\1/'; echo aaa | sed -E 's/(a)a/\\1b/'; echo /usr/local/bin | sed 's#/#|#g'; echo Hello | sed 's/hello/bye/I'",
    "printf 'name=old\\nport=80\\nhost=x\\n' > conf; sed -i 's/old/new/' conf; sed -i '/port/d' conf; cat conf; sed -i.bak 's/new/newer/' conf; cat conf; cat conf.bak; sed -i -e 's/^host=.*/host=y/' conf; cat conf",
    "printf 'a\\nb\\nc\\n' > f; sed '1i header' f; sed '$a footer' f; sed '2c changed' f; sed '/b/a after-b' f; sed '1,2c\\\nX' f; sed 'a\\\nx' f; sed '2i\\   indented' f",
    "printf 'a\\nb\\nc\\nd\\ne\\n' > f; sed -n '2p' f; sed '2!d' f; sed -n '/b/,/d/p' f; sed '1~2d' f; sed '2q' f; sed -n '$=' f; sed '0,/c/d' f; sed '2,+1d' f; sed -n '3,$p' f; sed '$!d' f; sed 3Q f; echo; sed -n '/x/,$p' f",
    "printf 'aaa\\nabc\\n' > f; sed 's/a/b/2' f; sed 's/x*/-/g' f; sed 's/a/X/gp' f; sed -n 's/b/B/p' f; sed 'y/abc/xyz/' f; sed -e 's/a/1/' -e 's/b/2/' f; sed 's/a/1/;s/c/3/' f; sed = f; sed -s -n '$p' f f; sed -n '$p' f f",
    "printf 'one\\ntwo\\nthree\\n' > f; sed 'N;s/\\n/+/' f; sed -n 'h;n;G;p' f; sed '1!G;h;$!d' f; sed 'n;d' f; sed '$!N;P;D' f; sed -n 'x;p' f; sed 'H;$!d;x' f",
    "printf 'a\\nb' | sed 's/a/x/'; printf 'a.b\\n' | sed 's/a\\.b/ok/'; printf 'x1y22\\n' | sed -E 's/[0-9]+/N/g'; printf 'tab\\n' | sed 's/a/\\t/'; printf 'ab\\n' | sed 's/\\(a\\)\\(b\\)/\\2\\n\\1/'; printf 'q\\n' | sed 5q; echo rc=$?; printf 'q\\n' | sed 'q 3'; echo rc=$?",
    "sed; echo rc=$?; echo a | sed k; echo rc=$?; echo a | sed 's/a/b'; echo rc=$?; sed p nofile; echo rc=$?; echo a | sed -x p; echo rc=$?; echo a | sed 'y/ab/x/'; echo rc=$?; sed -i s/a/b/; echo rc=$?",
];

const AWK: &[&str] = &[
    "printf 'alice 30\\nbob 25\\ncarol 35\\n' > p; awk '{print $1}' p; awk '$2 > 28 {print $1, $2}' p; awk '{s+=$2} END {print s, s/NR}' p; awk '{print NR\": \"$0}' p; awk 'END {print NR, $0}' p",
    "echo 'a:b:c' | awk -F: '{print $2; print NF; print $NF}'; echo 'a b c' | awk 'BEGIN{OFS=\"-\"} {$1=$1; print}'; echo 'x,y' | awk -F, -v OFS=';' '{print $2,$1}'; printf 'k1=v1\\nk2=v2\\n' | awk -F= '{printf \"%s -> %s\\n\", $1, $2}'; echo '  lead   spaces  ' | awk '{print $1 \"|\" $2}'; echo 'a1b22c' | awk -F'[0-9]+' '{print $1, $2, $3, NF}'; printf 'a\\tb c\\n' | awk -F'\\t' '{print $2}'",
    "echo 'Hello World' | awk '{ printf \"%-8s|%5d\\n\", toupper($1), length($2); print substr($1, 2, 3); n = split(\"x-y-z\", a, \"-\"); print n, a[3]; s = $0; gsub(/o/, \"0\", s); print s; t = $0; sub(/l+/, \"L\", t); print t; print index($0, \"World\"), tolower($2) }'",
    "seq 1 20 | awk 'NR==3; NR>=18'; seq 1 10 | awk '/4/,/6/'; seq 1 5 | awk 'NR%2==0 {next} {print \"odd\", $0}'; seq 1 5 | awk 'length($0) > 0 && $1 > 3'; seq 1 3 | awk '!/2/'",
    "printf 'b 2\\na 1\\nb 3\\n' | awk '{c[$1]+=$2} END {for (k in c) print k, c[k]}' | sort; awk 'BEGIN {x[1]; if (1 in x) print \"in\"; delete x[1]; if (!(1 in x)) print \"gone\"; print length(\"abc\")}'; awk 'function f(n) { return n <= 1 ? 1 : n * f(n-1) } BEGIN { print f(10) }'; awk 'function fill(arr, n) { for (i = 1; i <= n; i++) arr[i] = i*i } BEGIN { fill(sq, 4); print sq[3] }'",
    "awk 'BEGIN { printf \"%d %i %5.2f %e %g %x %o %c %c %s|%-4s|%04d\\n\", 3.9, -2.5, 3.14159, 12345.678, 0.0001, 255, 8, 65, \"hi\", \"str\", \"ab\", 42 }'; awk 'BEGIN { print 1/3; OFMT=\"%.2f\"; print 1/3; x = 0.1 + 0.2; print x \"\"; print 1e6, 1e20, 100000 * 100000 }'",
    "awk 'BEGIN { i = 0; while (i < 3) { i++; if (i == 2) continue; print \"w\" i }; do { i-- } while (i > 0); print i; for (;;) { if (++i > 2) break }; print i; print 2^10, 2^3^2, -2^2, 7%3, \"10\" < \"9\", 10 < 9 }'",
    "printf '3\\n10\\n2\\n' > n; awk '$1 > 5' n; awk '{ if ($1 ~ /^[0-9]$/) print \"one digit\", $1; else print \"more\", $1 }' n; awk -v x=5 'BEGIN { print x + 1 }'; awk '{ $3 = \"c\"; print; print NF }' n | head -2; echo 'a b c d' | awk '{ NF = 2; print }'; awk 'BEGIN { s = \"aaa\"; print gsub(/a/, \"&&\", s), s; t = \"x.y\"; sub(/\\./, \"\\\\&\", t); print t; print match(\"foobar\", /o+/), RSTART, RLENGTH }'",
    "awk; echo rc=$?; awk '{' /dev/null; echo rc=$?; awk 'BEGIN { print 1/0, -1/0, 5%0 }'; echo rc=$?; awk 1 nofile; echo rc=$?; awk 'BEGIN { exit 3 } END { print \"end\" }'; echo rc=$?; echo x | awk '{ exit } END { print \"end\", NR }'; printf 'a\\nb\\n' | awk 'NR == 1 { print; next } { print \"second\", $0 }'",
    "printf 'x 1\\ny 2\\n' > f; awk '{ print FILENAME, FNR, NR }' f f; awk '{ print v, $1 }' v=1 f v=2 f; awk 'BEGIN { print substr(\"hello\", 0, 2), substr(\"hello\", -1), substr(\"hello\", 2), substr(\"hello\", 4, 100) \"|\" substr(\"hello\", -1, 3) \"|\" substr(\"hello\", 1.5, 2) \"|\" substr(\"hello\", 2, -1) \"|\" }'; awk 'BEGIN { print 2147483647, 2147483648, -2147483648, 1e15; printf \"%d\\n\", 2^40 }'; awk 'BEGIN { print index(\"abc\", \"\"), length(), split(\"\", q), toupper(\"é\") }' </dev/null",
];

const HASHES: &[&str] = &[
    "echo -n hello | md5sum; printf 'abc' > f; sha256sum f; sha1sum f | cut -d' ' -f1; sha512sum f; md5sum -b f; md5sum --tag f; sha256sum f - < f; cksum f; cksum < f; printf '' | cksum; seq 1000 | cksum",
    "printf 'abc' > f; printf 'x' > g; sha256sum f g > sums; sha256sum -c sums; echo rc=$?; printf 'y' > g; sha256sum -c sums; echo rc=$?; sha256sum --quiet -c sums; sha256sum --status -c sums; echo rc=$?; rm g; sha256sum -c sums; echo rc=$?; sha256sum -c --ignore-missing sums; echo rc=$?; md5sum nofile; echo rc=$?; echo junk | md5sum -c; echo rc=$?",
    "echo 'hello world' | base64; echo aGVsbG8K | base64 -d; seq 100 | base64; seq 100 | base64 -w 0; echo; seq 100 | base64 -w 20 | base64 -d | tail -1; printf '' | base64; echo 'aGVs!bG8K' | base64 -d -i; echo 'a' | base64 -d; echo rc=$?; base64 -x; echo rc=$?",
];

const COMPARE: &[&str] = &[
    "printf 'a\\nb\\nc\\n' > 1; printf 'b\\nc\\nd\\n' > 2; comm 1 2; comm -12 1 2; comm -3 1 2; comm -23 1 2; diff 1 2; echo rc=$?; diff 1 1; echo rc=$?; cmp -s 1 2; echo cmp=$?; cmp -s 1 1; echo cmp=$?; cmp 1 2; echo rc=$?",
    "printf 'a\\nb\\nc\\n' > 1; printf 'a\\nX\\nc\\ne\\n' > 3; diff 1 3; diff 3 1; printf 'a\\n' > 4; cmp 1 4; echo rc=$?; : > e; cmp e 1; echo rc=$?; diff 1 nofile; echo rc=$?; diff -q 1 3; echo rc=$?; diff --brief 1 1; echo rc=$?; cmp 1 nofile; echo rc=$?",
    "seq 1 10 > a; seq 1 10 | sed -e '3d' -e '7s/7/seven/' > b; printf 'x\\n' >> b; diff a b; echo rc=$?; printf 'a' > n1; printf 'b' > n2; diff n1 n2; echo rc=$?; printf 'q\\nw\\n' | diff - a | head -3; comm a a | wc -l",
];

const FILE_TOOLS: &[&str] = &[
    "printf x > a; install -m 644 a b; stat -c '%a %s' b; install -D a x/y/z; ls -R x; install -d -m 700 p/q; stat -c %a p p/q; install -v a b2; install a f; stat -c %a f; mkdir t; install a f t; ls t; install -t t -m 600 b; stat -c %a t/b; install -m u=rw,go=r a g; stat -c %a g",
    "printf x > a; install; echo rc=$?; install a; echo rc=$?; install nofile b; echo rc=$?; mkdir d; install d e; echo rc=$?; install a b c; echo rc=$?; install -m zz a b; echo rc=$?; install -T a d; echo rc=$?; install -x a b; echo rc=$?",
    "printf '12345' > f; wc -c < f; truncate -s 2 f; cat f; echo; truncate -s +3 f; wc -c < f; truncate -s '<1' f; wc -c < f; truncate -s 1K g; wc -c < g; truncate -s %1000 g; wc -c < g; truncate -s /1000 g; wc -c < g",
    "truncate -c -s 5 none; ls; truncate; echo rc=$?; truncate -s x f; echo rc=$?; truncate -s 5 nodir/x; echo rc=$?; mkdir d; truncate -s 1 d; echo rc=$?; truncate -s 3 f1 f2; wc -c f1 f2",
    "set -o pipefail; r() { \"$@\" | while IFS= read -r l; do echo \"${l#\"$PWD\"}\"; done; }; mkdir -p a/b; ln -s a/b l; ln -s /nowhere dead; r realpath a/b l a/../a/b .; r readlink -f a/../a/b; readlink l; readlink a; echo rc=$?; r readlink -f l/../b; r realpath -s l; realpath -e nope; echo rc=$?",
    "set -o pipefail; r() { \"$@\" | while IFS= read -r l; do echo \"${l#\"$PWD\"}\"; done; }; mkdir -p a/b; r realpath a/x; realpath a/x/y; echo rc=$?; r realpath -m a/x/y/../z; readlink -m /x/../y; r readlink -e a/b; readlink -e a/x; echo rc=$?; ln -s /nowhere dead; realpath dead; ln -s dead loop1 2>/dev/null; realpath -q a/x/y; echo rc=$?; realpath; echo rc=$?",
];

/// jq 1.6 (Debian 12's `jq` package; `scripts/setup-sim` installs it when missing).
const JQ: &[&str] = &[
    r#"printf '{"a":[1,2.50,{"b":null}],"c":"x","d":{},"e":[]}' > f; jq . f; jq -c . f; jq .a f; jq '.a[2]' f; jq -r .c f; jq .c f; jq -j '.c, .c' f; echo; jq --tab . f; jq --indent 1 .a f; jq --indent 0 . f"#,
    r#"echo '{"b":1,"a":{"d":1,"c":2}}' | jq -S .; echo '{"b":1,"a":{"d":1,"c":2}}' | jq -S -c .; echo '{"b":1,"a":2}' | jq 'keys, keys_unsorted, length, to_entries' -c"#,
    r#"jq -n '1e17, 1e16, 123456789012345678, 1e-5, 0.0001, 3.14, 1.0, 100, 1e1000, 5e-324, 12345678901234567890123, 0.1 + 0.2, 1/3, 10/2, 3 * 1.5'"#,
    r#"jq -n '"x\u007f\u0001é\t\"\\/", "\u00e9" | ., length'; jq -n -a '"é€𝄞"'; jq -n -r '"a\tb"'"#,
    r#"echo '[{"n":"a","v":3},{"n":"b","v":1},{"n":"a","v":2}]' > f; jq -c 'map(select(.v > 1))' f; jq -c 'sort_by(.v)' f; jq -c 'group_by(.n) | map({n: .[0].n, total: (map(.v) | add)})' f; jq -c 'unique_by(.n)' f; jq 'map(.v) | add, max, min, length' f; jq -r '.[] | "\(.n)=\(.v)"' f; jq -r '.[] | [.n, .v] | @csv' f; jq -r '.[] | [.n, .v] | @tsv' f"#,
    r#"echo '{"a":1,"b":null,"c":false}' > f; jq '.b // "dflt", .c // "d2", .a // 5, .x' f; jq 'has("a"), has("x")' f; jq -c 'del(.a)' f; jq -c '.a += 10 | .n = "new"' f; jq -c 'to_entries | map(select(.value != null)) | from_entries' f; jq -c 'with_entries(.key |= ascii_upcase)' f; jq -c 'map_values(. // 0)' f"#,
    r#"jq -n --arg x 5 --argjson y '{"z":[1]}' '$x, $y, $y.z[0], ($x | tonumber) + 1' -c; jq -n --arg a b '$ARGS.named' -c; jq -n '[range(5)], [range(2;10;3)], [limit(3; range(100))], first(range(10;20))' -c"#,
    r#"echo '1 2 3' | jq -s 'add'; echo '1 2 3' | jq -s -c .; echo '1 2 3' | jq -c '[., input]' ; echo '1 2 3 4' | jq -n -c '[inputs]'; echo '1 2' | jq -n 'input'; printf 'a\nb\n' | jq -R .; printf 'a\nb\n' | jq -Rs .; printf 'a\nb' | jq -R -c '[., length]'; printf 'x\ny\n' | jq -Rn '[inputs]' -c"#,
    r#"echo '{}' | jq -e .a; echo rc=$?; echo '{"a":false}' | jq -e .a; echo rc=$?; echo '{"a":1}' | jq -e .a; echo rc=$?; jq -n -e empty; echo rc=$?; echo '{}' | jq .a.b.c; echo rc=$?"#,
    r#"echo '{bad' | jq .; echo rc=$?; echo '1 {bad' | jq .; echo rc=$?; echo 1 | jq 'error("x")'; echo rc=$?; echo 1 | jq '.['; echo rc=$?; jq -n 'foo'; echo rc=$?; jq . nofile; echo rc=$?; jq; echo rc=$?; jq --nope .; echo rc=$?; jq -n '"a" + 1'; echo rc=$?; echo '[1,2]' | jq '.[] | (1 / .) , error("boom")'; echo rc=$?"#,
    r#"jq -n '"a,b,c" | split(","), (split(",") | join("-")), ascii_downcase, ascii_upcase, test("B"), test("b"; "i"), ltrimstr("a,"), rtrimstr(",c"), startswith("a"), endswith("x"), (explode | implode), length, .[2:], .[:-2]' -c"#,
    r#"jq -n '"hello world" | sub("o"; "0"), gsub("o"; "0"), [match("o+"; "g").offset], (capture("(?<first>\\w+) (?<second>\\w+)")), [scan("l+")], indices("o"), index("o"), rindex("o")' -c"#,
    r#"jq -n '[1,[2,[3,[4]]]] | flatten, flatten(1), (tojson), (tojson | fromjson), contains([1]), (.[1] | length)' -c; jq -n '{"a":{"b":1}} | [paths], [leaf_paths], getpath(["a","b"]), setpath(["a","c"]; 2), [.. | numbers]' -c"#,
    r#"jq -n 'reduce range(10) as $i (0; . + $i), ([range(5)] | map(. * 2) | any(. > 7), all(. < 9)), (try error("e") catch .), (if 1 > 2 then "a" elif 2 > 1 then "b" else "c" end), ([3,1,2] | sort, reverse, unique, min, max), (1 as $x | 2 as $y | [$x, $y])' -c"#,
    r#"jq -n '[1.5, -1.5, 2.5] | map(floor), map(sqrt | . * 100 | floor), map(fabs), map(tostring), map(tojson), (.[0] | @text), ("\(1.5) \(2)")' -c; jq -n '"1.50", "12" | tonumber'; jq -n '[.[]?], (null | length), ("abc" | @base64), ("YWJj" | @base64d), ("a b&c" | @uri), ("<&>" | @html), (["a b", "c'"'"'d"] | @sh), ([1,"a"] | @json)' -c"#,
    r#"jq -n '{"a":[{"b":1},{"b":2}]} | .a[].b, [.a[] | select(.b == 2)], (.a | map(.b) | add), (.a | length), (.a[0] | keys[0]), (.a | to_entries[0].key), ([.a[] | .b] | join(","))' -c; jq -n '[limit(3; repeat(1))], ([1,2,3] | IN(2)), ({"a":{}} | .a.b = 1), (walk(if type == "number" then . + 1 else . end)?)' -c"#,
    r#"printf '{"id":1,"tags":["x","y"]}\n{"id":2,"tags":[]}\n' > f; jq -c '{id, n: (.tags | length)}' f; jq -r '.tags[]' f; jq -c 'select(.tags | length > 0) | .id' f; jq -s 'map(.id) | add' f; jq -c '.tags |= map(ascii_upcase)' f; jq -r '.id | tostring' f; jq -c '[.id, .tags[0]]' f; jq -c 'del(.tags)' f; jq '.id' f f"#,
    r#"jq -n '$ENV.LANG, env.LANG, ($ENV | type), (env | has("PATH"))'; jq -n '[splits(", *"; null)]?' -c; jq -n '"a1b2" | [splits("[0-9]")]' -c; jq -n '[1,2,3] | .[1:], .[-1], .[5], (.[1] = 9), (. - [2]), (. + [4]), index(2)' -c"#,
];

/// GNU gzip 1.12. The compressed bytes are flate2's, so the cases compare what
/// decompresses, files and statuses, never compressed bytes.
const GZIP: &[&str] = &[
    "echo hi | gzip | gunzip; seq 1000 | gzip -9 | zcat | tail -2; seq 100 | gzip -c | gzip -dc | wc -l; printf '' | gzip | gunzip | wc -c",
    "seq 50 > f; gzip f; ls; gunzip f.gz; ls; tail -1 f; gzip -k f; ls; zcat f.gz | head -2; zcat f | head -1; echo rc=$?; gunzip -c f.gz | wc -l; rm f; zcat f | tail -1",
    "echo a > f; gzip f; echo a > f; gzip f; echo rc=$?; gzip -f f; echo rc=$?; ls; gzip f.gz; echo rc=$?; gunzip f; echo rc=$?; mkdir d; gzip d; echo rc=$?; gzip nofile; echo rc=$?; gzip -x; echo rc=$?",
    "echo junk > j.gz; gunzip j.gz; echo rc=$?; echo junk | gunzip; echo rc=$?; ls; gzip -t j.gz; echo rc=$?; echo ok | gzip > o.gz; gzip -t o.gz; echo rc=$?; gzip -d < o.gz; chmod 600 o.gz; gunzip o.gz; stat -c %a o",
    // data compressed by GNU gzip (-n), multi-member, and a .tgz name
    "printf 'H4sIAAAAAAAAA8tIzcnJ5wIAIDA6NgYAAAA=' | base64 -d > h.gz; zcat h.gz; cat h.gz h.gz | gunzip; cp h.gz t.tgz; gunzip t.tgz; ls; cat t.tar; gzip -c h.gz > hh.gz; gunzip -c hh.gz | gunzip",
];

/// od (coreutils 9.1), xxd (vim 9.0) and hexdump -C (util-linux 2.38).
const DUMPS: &[&str] = &[
    "printf 'hello world\\n\\001\\377abcdefghijklmnopqrstuvwxyz' > d; od d; od -c d; od -An -tx1 d; od -A x -t x1z d; od -t d1 -t c -N 20 d; od -x d; od -a d; od -t u2 d; od -b -N 4 d",
    "printf 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab' > a; od -c a; od -v -c a; od -w4 -tx1 -N 8 a; od -j 4 -N 6 -c a; od -tx4 a; od -t d2 a; od -t o1 -N 4 a; od -A d -t x8 a; od -i a; od -l a; od -s a; od -d a; od -tx2z a",
    "printf '' | od; printf '\\200\\377\\177' | od -t d1 -t u1 -t x1 -t o1; printf abc | od -An -tx1z; od nofile; echo rc=$?; od -t q /dev/null; echo rc=$?; od -A q /dev/null; echo rc=$?; seq 10 | od -An -c -w8",
    "printf 'hello world\\n\\001\\377abcdefghijklmnopqrstuvwxyz' > d; xxd d; xxd -p d; xxd -c 8 -g 1 d; xxd -u -l 5 d; xxd -s 3 -l 4 d; xxd -g 4 -l 9 d; xxd -p d | xxd -r -p | od -c; xxd d | xxd -r; xxd -c 5 -p d; seq 20 | xxd -g 0",
    "printf '' | xxd; echo rc=$?; xxd nofile; echo rc=$?; seq 3 | xxd -; printf 'ab' | xxd -g 3",
    "printf 'hello world\\n\\001\\377abcdefghijklmnopqrstuvwxyz' > d; hexdump -C d; printf 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab' | hexdump -C; printf '' | hexdump -C; hexdump -C -n 5 d; hexdump -C -s 10 -n 12 d; seq 30 | hexdump -C -v | tail -2; printf 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' | hexdump -C",
];

/// uname, hostname, whoami, id, nproc (coreutils 9.1, hostname 3.23), which (debianutils)
/// and mktemp: only what does not depend on the host (the tests run as root; the names
/// mktemp makes are compared by their shape).
const SYSINFO: &[&str] = &[
    "uname; uname -s; uname -m; uname -o; uname -sm; uname -x; echo rc=$?; uname a; echo rc=$?; uname -a | cut -d' ' -f1; uname -snrvmpio | cut -d' ' -f1",
    "whoami; whoami x; echo rc=$?; id; id -u; id -g; id -G; id -un; id -gn; id -Gn; id root; id -u root; id nosuch; echo rc=$?; id -n; echo rc=$?; id -x; echo rc=$?",
    "nproc | grep -c '^[0-9][0-9]*$'; nproc --all | grep -c '^[0-9]'; nproc x; echo rc=$?; nproc --ignore=1000; hostname | wc -l; hostname -s | wc -l; hostname -x; echo rc=$?",
    "which ls; which -a ls; which ls nosuch; echo rc=$?; which; echo rc=$?; which -x ls; echo rc=$?; which /bin/ls; which jq sed; which ./nope; echo rc=$?; printf '#!/bin/sh\\n' > s; chmod +x s; which ./s; chmod -x s; which ./s; echo rc=$?",
    "f=$(mktemp); test -f $f && stat -c %a $f; case $f in /tmp/tmp.??????????) echo shape;; esac; d=$(mktemp -d); test -d $d && stat -c %a $d; case $(mktemp -t foo.XXXX) in /tmp/foo.????) echo t;; esac; case $(mktemp q.XXX) in q.???) echo here;; esac; ls q.* | wc -l",
    "mktemp foo; echo rc=$?; mktemp -x; echo rc=$?; mktemp -p /nonexist; echo rc=$?; mktemp --suffix=.txt | grep -c '^/tmp/tmp\\...........\\.txt$'; mkdir t; TMPDIR=$PWD/t mktemp -t | grep -c /t/tmp; case $(mktemp -p t) in t/tmp.*) echo p;; esac; mktemp -u | xargs test -e; echo rc=$?; mktemp a/b.XXX -t; echo rc=$?; mktemp -d -q -p /nonexist; echo rc=$?",
];

/// fold and expand (coreutils 9.1), column -t (util-linux 2.38).
const LAYOUT: &[&str] = &[
    "printf 'hello world this is a long line of text\\nshort\\n' > f; fold -w 10 f; fold -s -w 10 f; fold -b -w 7 f; fold -w5 f | head -3; fold -3 f | head -2; printf 'a\\tb\\tc\\td\\n' | fold -w 10; printf 'abc\\rdefgh\\n' | fold -w 4; printf 'nonl' | fold -w 2; echo; fold -w 0 f; echo rc=$?; fold nofile; echo rc=$?",
    "printf 'abc\\tdef\\n\\tx\\ty\\n' > t; expand t; expand -t 4 t; expand -i t; expand -t 2,6 t; expand -t 3 -i t; printf 'a\\bb\\tc\\n' | expand; expand -t x t; echo rc=$?; expand nofile; echo rc=$?",
    "printf 'a\\tb  c\\td\\n1 2 3\\n\\nlonger field x\\n' > c; column -t c; printf 'a:b::c\\nddd:e:f\\n' | column -t -s:; printf 'a b\\n' | column -t -o '|'; printf 'x  y\\n' | column -t -s ' '; printf 'k=v\\nkey=value\\n' | column -t -s= -o ' = '; printf '' | column -t; column -t nofile; echo rc=$?; printf 'é b\\nab c\\n' | column -t",
];

/// join (coreutils 9.1).
const JOIN: &[&str] = &[
    "printf '1 a\\n2 b\\n3 c\\n' > x; printf '1 A\\n3 C\\n4 D\\n' > y; join x y; join -a1 x y; join -a2 x y; join -a1 -a2 x y; join -v1 x y; join -v2 x y; join -o 1.2,2.2 x y; join -o 0,2.2 -a1 -e NA x y; join -o auto -a2 -e - x y",
    "printf 'a,1,x\\nb,2,y\\n' > p; printf 'p,1\\nq,2\\n' > q; join -t, -1 2 -2 2 p q; join -t, -j 2 -o 1.1,2.1 p q; printf 'k 1\\nk 2\\n' > m; printf 'k A\\nk B\\n' > n; join m n; printf 'A 1\\nb 2\\n' > u; printf 'a x\\nB y\\n' > v; join -i u v",
    "printf 'id name\\n1 a\\n2 b\\n' > h; printf 'id val\\n2 z\\n' > g; join --header h g; printf '2 b\\n1 a\\n' > s; printf '1 A\\n2 B\\n' > t; join s t; echo rc=$?; join --nocheck-order s t; echo rc=$?; join --check-order s t; echo rc=$?; join x; echo rc=$?; join x nofile; echo rc=$?; join -t ab x x; echo rc=$?",
    "printf '  1   a\\n2\\tb\\n' > w; printf '1 X\\n2 Y\\n' > z; join w z; printf 'a\\0b\\0' > n1; printf 'a\\0' > n2; join -z n1 n2 | tr '\\0' @; echo; printf '1 a b c\\n' > l; printf '1 x\\n' > r; join l r; join -o 1.4,2.2,1.9 l r; seq 5 | join - <(seq 3 7)",
];

/// du and df (coreutils 9.1). du's usage is the host's ext4 (4 KiB blocks, directories
/// 4 KiB); entries are sorted (the host lists them in its directory order). df's disk is
/// virtual: only its header and shape are compared.
const DISK: &[&str] = &[
    "mkdir -p du/a/b; echo hi > du/a/f; head -c 5000 /dev/zero > du/a/b/g; ln -s f du/a/l; du du | sort -k2; du -a du | sort -k2; du -s du; du -sh du; du -c du/a du/a/b; du -h du/a/b/g; du -sb du; du -d 1 du | sort -k2; du -sk du/a/f du/a/l",
    "mkdir d; head -c 3000000 /dev/zero > d/big; du -sh d; du -h d/big; du -sm d; du -ch d d; du nofile; echo rc=$?; du -sa d; echo rc=$?; cd d; du; du -a | sort -k2",
    "df | head -1 | tr -s ' '; df -h | head -1 | tr -s ' '; df / | wc -l; df -h / | tail -1 | awk '{print $NF}'; df -T / | head -1 | awk '{print $2}'; df nofile; echo rc=$?",
];

/// split (coreutils 9.1).
const SPLIT: &[&str] = &[
    "seq 2500 > f; split f; ls; wc -l xaa xab xac | tail -4; rm x*; split -l 7 f p_; ls | wc -l; ls | head -3; ls | tail -2; cat p_* | cmp - f && echo same",
    "seq 1000 > f; split -b 1K f; ls x* | wc -l; wc -c < xad; rm x*; split -b 1000 -d f n; ls n*; rm n*; split -n 3 f; wc -c xaa xab xac; rm x*; split -n 3 -d --additional-suffix=.txt f q; ls q*",
    "seq 10 | split -l 3 - s; ls s*; cat sad; seq 10 | split -l 1 -a 1; ls x* | wc -l; seq 30 | split -l 1 -a 1; echo rc=$?; split -l 0 /dev/null; echo rc=$?; split nofile; echo rc=$?; split -x; echo rc=$?; printf '' | split; ls | wc -l",
    "seq 700 | split -l 1; ls x* | tail -3; ls x* | wc -l; seq 20 | split -l 2 --numeric-suffixes=3 - y; ls y*; seq 40 | split -l 2 -x - h; ls h* | tail -2",
];

/// shuf (coreutils 9.1 options): its order is the machine's, so the cases compare what
/// does not depend on it (the multiset of lines, counts).
const SHUF: &[&str] = &[
    "seq 100 | shuf | sort -n | md5sum; seq 100 | shuf -n 5 | wc -l; seq 100 | shuf -n 5 | sort -n | uniq | wc -l; shuf -i 1-10 | sort -n | tr '\\n' ' '; echo; shuf -e a b c | sort; shuf -r -n 50 -i 1-2 | sort -u; shuf -n 0 -i 1-5 | wc -l",
    "seq 5 > f; shuf f | sort; shuf -o out f; sort out; shuf -n 100 f | wc -l; printf 'a\\0b\\0' | shuf -z | sort -z | tr '\\0' @; echo; shuf nofile; echo rc=$?; shuf -i 5-1; echo rc=$?; shuf -i 3-3; shuf -e; echo rc=$?; shuf -x; echo rc=$?; printf '' | shuf | wc -c",
];

/// numfmt (coreutils 9.1).
const NUMFMT: &[&str] = &[
    "numfmt --to=iec 1048576 1500 1024 1000 123456789 10240 10239 0 2048; numfmt --to=si 1000 1500 999 9999; numfmt --to=iec-i 2048; numfmt --from=iec 1K 1.5M; numfmt --from=si 1K; numfmt --from=auto 1Ki 1K",
    "numfmt --suffix=B --to=iec 2048; numfmt --padding=8 --to=iec 2048; numfmt --padding=-8 --to=iec 2048; echo; numfmt --to=iec 1.7; numfmt --from=none 5; numfmt --to=iec --round=down 1500; numfmt --to=iec --round=nearest 1500 1600",
    "echo 'a 2048 b' | numfmt --field=2 --to=iec; printf 'h 1\\nx 2048\\n' | numfmt --header --field 2 --to=iec; echo '1024,2048' | numfmt -d, --field=2 --to=iec; printf '1024\\n2048\\n' | numfmt --to=iec; numfmt x; echo rc=$?; numfmt --to=si 1e3; echo rc=$?; numfmt --to=bad 1; echo rc=$?",
];

/// GNU tar 1.34: what does not depend on the host's directory order (listings sorted, or
/// of one file per directory).
const TAR: &[&str] = &[
    "mkdir -p p/q; echo 1 > p/a; echo 2 > p/q/b; tar czf y.tgz p && tar xzf y.tgz -O p/a; tar tzf y.tgz | sort; tar tf y.tgz | sort; mkdir o; tar xf y.tgz -C o --strip-components=1; find o | sort; cat o/q/b; tar xOf y.tgz p/q; tar -xzOf y.tgz p/q/b p/a | sort; tar -czf - p | tar -xzf - -C o; find o | sort",
    "mkdir -p p/q; echo 1 > p/a; echo 2 > p/q/b; tar cvf x.tar p | sort; tar cvf - p 2>/dev/null | tar t | sort; tar cf - --exclude=q p | tar t | sort; tar cf - --exclude='p/q' p | tar t | sort; tar tf x.tar --exclude='*a' | sort; tar tf x.tar p/a nope; echo rc=$?; mkdir o; tar xvf x.tar -C o --strip-components=1 | sort; find o | sort; tar xvOf x.tar p/a 2>/dev/null; tar --list --file=x.tar --exclude=b | sort",
    // (the listing's date is the machine's clock)
    "mkdir p; echo hello > p/f; l() { cut -c1-30; }; tar cf x.tar p; tar tvf x.tar | l; tar -tv -f x.tar p/f | l; chmod 750 p/f; tar cf z.tar p/f; tar tvf z.tar | l; head -c 123456 /dev/zero > p/big; tar cf b.tar p/big; tar tvf b.tar | l; rm -r p; tar xf x.tar; stat -c '%a %s' p p/f",
    "mkdir p; echo 1 > p/a; tar czf - p | tar tf -; echo rc=$?; echo x > x.tar; tar tzf x.tar 2>/dev/null; echo rc=$?; tar xf nonexist.tar; echo rc=$?; tar; echo rc=$?; tar cf e.tar; echo rc=$?; tar -c -x -f f; echo rc=$?; tar --bogus; echo rc=$?; tar -cf x.tar --strip-components=x p; echo rc=$?; ls",
];

/// GNU bc 1.07.1: each script's stderr joins its stdout (`2>&1`) with the bytecode address
/// of runtime messages (`adr=N`, not modelled by the simulator) masked.
const BC: &[&str] = &[
    "b() { bc \"$@\" 2>&1 | sed 's/adr=[0-9]*/adr=0/'; }; printf 'scale=2; 10/3\\n2^10\\n3 * (4 + 5)\\n0.00\\n-0.5\\nscale=3;1/3;-1/3\\n1/0\\n2\\n' | b; printf '2+\\n3\\n1+ +\\n4\\nx=3;x;x+1\\n' | b",
    "b() { bc \"$@\" 2>&1 | sed 's/adr=[0-9]*/adr=0/'; }; printf 'length(0.000123);length(123.45);length(0);scale(1.50);length(0.0);length(0.00);length(100)\\n2^0.5;2^2.0;2^-2;scale=4;2^-2;-2^2\\n' | b",
    "b() { bc \"$@\" 2>&1 | sed 's/adr=[0-9]*/adr=0/'; }; printf 'ibase=16;FF;A;ibase=A;A;19;AB\\nobase=16;255;-255.5;obase=100;123456.7;obase=2;0.1;obase=7;1000;obase=20;12345.678\\n' | b; printf 'ibase=2; 1010.1; ibase=1010; obase=16; 255.5\\nibase=1;ibase=17;ibase;obase=1;scale=-1\\n' | b",
    "b() { bc \"$@\" 2>&1 | sed 's/adr=[0-9]*/adr=0/'; }; printf 'sqrt(2);scale=5;sqrt(2);sqrt(-1)\\n\"ab\\\\ncd\"\\nprint \"x\\\\ny\", 1+1, \"\\\\n\"\\nprint \"\\\\q\\\\\\\\ \\\\t|\\\\z\\\\n\"\\n5%%3;scale=2;5%%3;-5%%3;5.5%%2\\n' | b",
    "b() { bc \"$@\" 2>&1 | sed 's/adr=[0-9]*/adr=0/'; }; printf 'a[3]=5;a[3];a[2];b\\ndefine f(x) { auto y; y = x*2; return y+g(); }\\ndefine g() { return y; }\\nf(3)\\ny\\nx=5; x++; ++x; x--; x; -x; !0; !5; 1&&0; 1||0; 3<2; 2<=2; 1==1; 1!=1\\nlast; 7; last; .\\n' | b",
    "b() { bc \"$@\" 2>&1 | sed 's/adr=[0-9]*/adr=0/'; }; printf 'define h(a[]) { a[0]=9; return a[0]; }\\nb[0]=1; h(b[]); b[0]\\nfor(i=0;i<3;i++) i\\ni=0; while (i<2) { i; i+=1 }\\nif (1) 1 else 2\\nif (0) 1 else 2\\nfor(;;) { break }\\nprint 1,2\\n3\\ndefine void g() { print \"v\\\\n\" }\\ng()\\nx = 1 < 2\\nx\\n1 < x = 2\\nx\\n' | b",
    "b() { bc \"$@\" 2>&1 | sed 's/adr=[0-9]*/adr=0/'; }; printf 'define fact(n) { if (n<2) return 1; return n*fact(n-1); }\\nfact(30)\\n99999999999999999999999*88888888888888888888888\\n-1.000 * 3\\n0.1+0.20\\nscale=3; -7/2; -7%%2; 7%%-2; 1.5%%1\\na=10; a+=5; a; a-=3; a; a*=2; a; a/=5; a; a%%=3; a; a^=3; a\\n' | b; printf 'define f(n) { if (n == 0) return (0); return (f(n-1) + 1); }\\nf(500)\\nx[0]=1;x[1]=2\\ndefine s(a[]) { auto i, t; for (i=0; i<2; i++) t += a[i]; return t; }\\ns(x[])\\n/* c\\n d */ 1 # h\\n2\\\\\\n3\\n' | b",
    "b() { bc \"$@\" 2>&1 | sed 's/adr=[0-9]*/adr=0/'; }; echo '2^300' | b; echo '2^300' | BC_LINE_LENGTH=10 b; echo '2^300' | BC_LINE_LENGTH=0 b; echo '2^300' | BC_LINE_LENGTH=2 b; echo '2^200' | BC_LINE_LENGTH=3 b | head -3; echo 'print \"abc\"; 2^300' | b; printf 'print \"%s\\\\n\"\\n' $(printf '%.0sa' $(seq 100)) | b",
    "b() { bc \"$@\" 2>&1 | sed 's/adr=[0-9]*/adr=0/'; }; printf '1+1' | b; echo rc=$?; printf '1;quit\\n2\\n' | b; printf 'if (0) quit\\n5\\n' | b; printf 'limits;1\\n' | b; echo 'halt; 5' | b; echo 'break' | b; echo 'return 5' | b; echo 'f(' | b; echo '3 $ 4' | b; printf '@\\n1+@\\n' | b; echo 'x = (1+2' | b; echo 'define f() { return 1 }; f()' | b; printf 'f(1)\\ndefine f(x) { return x; }\\nf(1,2); f(); a[-1]=2; q[16777216]=1\\n' | b",
    "printf '1+1\\n' > f1; printf '3+\\n4\\n' > f2; echo 9 | bc f1 f2 2>&1; echo rc=$?; echo 5 | bc nofile f1; echo rc=$?; echo 1 | bc -q; bc -l < /dev/null; echo rc=$?",
    "b() { bc \"$@\" 2>&1 | sed 's/adr=[0-9]*/adr=0/'; }; printf 'e(1);l(2);s(1);c(1);a(1);j(1,2)\\nscale=50;e(1);a(.2);l(0);sqrt(2)\\nscale=20\\ne(-3.5);e(10);e(0);l(0.001);l(1000);l(1);s(-2);s(100);c(0);c(3.14159);a(-0.5);a(5);a(.1);j(0,1);j(-3,2.5);j(5,-1)\\nscale=5; e(2); s(0.5); c(0.5); a(2); l(10); j(2,3)\\nscale=70; a(1); 4*a(1)\\nscale=100; e(1)\\nobase=16; e(1)\\n' | b -l; echo 's(1)' | b --mathlib; echo 'e(1)' | b",
];

fn host_has(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Runs each script on the host and in the simulator; the differences found.
fn differences(scripts: &[&str]) -> Vec<String> {
    let f = SimMachineFactory::new();
    let bin = tempfile::tempdir().unwrap();
    // `awk` is mawk, as on Debian 12
    if let Ok(mawk) = which("mawk") {
        std::os::unix::fs::symlink(mawk, bin.path().join("awk")).unwrap();
    }
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    let mut failures = Vec::new();
    for script in scripts {
        let dir = tempfile::tempdir().unwrap();
        let real = std::process::Command::new("bash")
            .args(["--norc", "--noprofile", "-c", script])
            .current_dir(dir.path())
            .env_clear()
            .env("LANG", "C.UTF-8")
            .env("PATH", &path)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let m = f.create_sim(MachineSpec::sim().workdir("/work")).unwrap();
        let sim = m
            .run_sync(
                Command::from_argv(["bash", "-c", script])
                    .cwd("/work")
                    .envs([("LANG", "C.UTF-8"), ("PATH", "/usr/bin:/bin")])
                    .timeout(std::time::Duration::from_secs(60)),
            )
            .unwrap();
        if real.stdout != sim.stdout || real.status.code() != sim.exit_code {
            failures.push(format!(
                "{script}\n  real: {:?}\n{}\n  sim: {:?}\n{}\n  sim stderr: {}",
                real.status.code(),
                String::from_utf8_lossy(&real.stdout),
                sim.exit_code,
                String::from_utf8_lossy(&sim.stdout),
                String::from_utf8_lossy(&sim.stderr),
            ));
        }
    }
    failures
}

fn which(tool: &str) -> Result<String, ()> {
    let o = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map_err(|_| ())?;
    if !o.status.success() {
        return Err(());
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn check(test: &str, tool: &str, version_has: &str, scripts: &[&str]) {
    if !host_has(tool) {
        eprintln!("SKIP {test}: no {tool} on this host");
        return;
    }
    if !version_has.is_empty() {
        let v = std::process::Command::new(tool)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if !v.contains(version_has) {
            eprintln!("SKIP {test}: {tool} on this host is not {version_has}");
            return;
        }
    }
    let d = differences(scripts);
    assert!(
        d.is_empty(),
        "{} of {} differ:\n{}",
        d.len(),
        scripts.len(),
        d.join("\n")
    );
}

#[test]
fn grep_matches_gnu_grep() {
    check("grep_matches_gnu_grep", "grep", "GNU grep", GREP);
}

#[test]
fn xargs_matches_gnu_findutils() {
    check(
        "xargs_matches_gnu_findutils",
        "xargs",
        "GNU findutils",
        XARGS,
    );
}

#[test]
fn printenv_and_yes_match_gnu() {
    check(
        "printenv_and_yes_match_gnu",
        "printenv",
        "GNU coreutils",
        MISC,
    );
}

#[test]
fn find_matches_gnu_findutils() {
    check("find_matches_gnu_findutils", "find", "GNU findutils", FIND);
}

#[test]
fn sort_matches_gnu_sort() {
    check("sort_matches_gnu_sort", "sort", "GNU coreutils", SORT);
}

#[test]
fn nl_and_paste_match_gnu_coreutils() {
    check(
        "nl_and_paste_match_gnu_coreutils",
        "nl",
        "GNU coreutils",
        NL_PASTE,
    );
}

#[test]
fn truncate_realpath_readlink_match_gnu_coreutils() {
    check(
        "truncate_realpath_readlink_match_gnu_coreutils",
        "truncate",
        "GNU coreutils",
        FILE_TOOLS,
    );
}

#[test]
fn expr_matches_gnu_coreutils() {
    check("expr_matches_gnu_coreutils", "expr", "GNU coreutils", EXPR);
}

#[test]
fn sed_matches_gnu_sed() {
    check("sed_matches_gnu_sed", "sed", "GNU sed", SED);
}

#[test]
fn awk_matches_mawk() {
    check("awk_matches_mawk", "mawk", "", AWK);
}

#[test]
fn hashes_and_base64_match_gnu_coreutils() {
    check(
        "hashes_and_base64_match_gnu_coreutils",
        "sha256sum",
        "GNU coreutils",
        HASHES,
    );
}

#[test]
fn comm_cmp_diff_match_gnu() {
    check("comm_cmp_diff_match_gnu", "diff", "GNU diffutils", COMPARE);
}

#[test]
fn jq_matches_jq_1_6() {
    check("jq_matches_jq_1_6", "jq", "jq-1.6", JQ);
}

#[test]
fn gzip_matches_gnu_gzip() {
    check("gzip_matches_gnu_gzip", "gzip", "gzip 1.12", GZIP);
}

#[test]
fn od_xxd_hexdump_match_debian() {
    check("od_xxd_hexdump_match_debian", "xxd", "", DUMPS);
}

#[test]
fn sysinfo_which_mktemp_match_debian() {
    check(
        "sysinfo_which_mktemp_match_debian",
        "uname",
        "GNU coreutils",
        SYSINFO,
    );
}

#[test]
fn fold_expand_column_match_debian() {
    check("fold_expand_column_match_debian", "column", "", LAYOUT);
}

#[test]
fn join_matches_gnu_coreutils() {
    check("join_matches_gnu_coreutils", "join", "GNU coreutils", JOIN);
}

#[test]
fn du_df_match_gnu_coreutils() {
    check("du_df_match_gnu_coreutils", "du", "GNU coreutils", DISK);
}

#[test]
fn split_matches_gnu_coreutils() {
    check(
        "split_matches_gnu_coreutils",
        "split",
        "GNU coreutils",
        SPLIT,
    );
}

#[test]
fn shuf_matches_gnu_coreutils() {
    check("shuf_matches_gnu_coreutils", "shuf", "GNU coreutils", SHUF);
}

#[test]
fn numfmt_matches_gnu_coreutils() {
    check(
        "numfmt_matches_gnu_coreutils",
        "numfmt",
        "GNU coreutils",
        NUMFMT,
    );
}

#[test]
fn tar_matches_gnu_tar() {
    check("tar_matches_gnu_tar", "tar", "GNU tar", TAR);
}

#[test]
fn bc_matches_gnu_bc() {
    check("bc_matches_gnu_bc", "bc", "bc 1.07", BC);
}
