# shellcheck shell=bash
# Shell helpers the test scripts share: . "$top/test/lib.sh"
# (test/perl/RedlockTest.pm is the TAP tests' counterpart, and
# test/perl/ReadmeSQL.pm reads README blocks for them.)

# A TCP port on 127.0.0.1 that nobody listens on right now, chosen by the
# kernel.  Someone may take it before the caller binds it: the caller must
# find out (a server that fails to start, or one that is not its own).
free_port() {
	perl -MIO::Socket::INET -e '
		my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0,
			Proto => "tcp", Listen => 1, ReuseAddr => 0) or die "free_port: $!\n";
		print $s->sockport, "\n";'
}

# readme_blocks FILE INFO DIR: the fenced blocks of FILE (README.md) whose
# info string is INFO ("sql", "sql install", "sh package"...; "sql" is not
# "sql norun"), in order, as DIR/block.1, DIR/block.2...; a ```text block
# that follows one (only blank lines between them) is that block's output,
# as psql prints it: DIR/out.N.  Prints how many blocks there are.
readme_blocks() {
	awk -v dir="$3" -v info="$2" '
		BEGIN { opening = "^```" info "[ \t]*$" }
		$0 ~ opening {
			inblock = 1; n++; file = dir "/block." n; printf "" > file; next }
		/^```text[ \t]*$/ && after == n && n > 0 && !(n in out) {
			inout = 1; out[n] = 1; file = dir "/out." n; printf "" > file; next }
		/^```/ {
			after = inblock ? n : -1
			if (inblock || inout) close(file)
			inblock = 0; inout = 0; next }
		inblock || inout { print > file; next }
		/^[ \t]*$/ { next }
		{ after = -1 }
		END { print n + 0 }
	' "$1"
}
