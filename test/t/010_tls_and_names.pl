# TLS to the nodes and host names: real redis-server processes with TLS
# (certificates made here with the openssl command line), and host names
# looked up asynchronously (c-ares) from /etc/hosts or from a DNS server of
# our own on loopback (test/perl/FakeDNS.pm, set with redlock.dns_servers,
# so that no lookup leaves the machine), including one that never answers.
use strict;
use warnings FATAL => 'all';

use FakeDNS;
use FakeRedis;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisNode;
use RedlockTest;
use TlsFiles;
use Test::More;
use Time::HiRes qw(time usleep);

my $tls = TlsFiles->new;
my $ca = $tls->file('ca.crt');

my $good = $tls->node('server');
my $mtls = $tls->node('server', auth_clients => 'yes');
my $authed = $tls->node('server', args => [ '--requirepass', 's3cret' ]);
my $wrong = $tls->node('wrongname');
my $expired = $tls->node('expired');
my $unknown = $tls->node('unknownca');
my $plain = RedisNode->new;
my $silent = FakeRedis->new(mode => 'silent');
my $dns = FakeDNS->new;

my $pg = redlock_cluster('tls', nodes => [$plain],
	conf => "redlock.connect_timeout = '3s'\nredlock.node_timeout = '2s'\n"
	  . "redlock.dns_servers = '${\ $dns->addr }'\n");

my $n = 0;

# one try_lock in a new backend with these settings; returns (token or '',
# stderr, seconds taken)
sub attempt
{
	my ($nodes, %set) = @_;
	my $sql = "SET redlock.nodes = '$nodes';\n";
	$set{tls_ca_file} //= $ca if ($set{tls_mode} // '') =~ /verify/;
	$sql .= "SET redlock.$_ = '$set{$_}';\n" for sort keys %set;
	$n++;
	my $t0 = time;
	my ($rc, $out, $err) = $pg->psql('postgres',
		$sql . "SELECT redlock_try_lock('tls:$n', 5000)");
	return ($out, $err, time - $t0);
}

# ---------------------------------------------------------------- TLS

my ($tok, $err, $took);
my $good_port = $good->port;

($tok, $err) = attempt("localhost:$good_port", tls_mode => 'verify-full');
like($tok, qr/^\d+$/, 'verify-full: granted by a node named localhost') or diag $err;
($tok, $err) = attempt("127.0.0.1:$good_port", tls_mode => 'verify-full');
like($tok, qr/^\d+$/, 'verify-full: granted by a node at 127.0.0.1 (IP in the certificate)')
  or diag $err;
like($good->cli('INFO', 'commandstats'), qr/cmdstat_eval(sha)?:calls=[2-9]/,
	'the leases were taken on the TLS node');
($tok, $err) = attempt($wrong->addr, tls_mode => 'verify-ca');
like($tok, qr/^\d+$/, 'verify-ca: granted although the certificate names another host')
  or diag $err;
($tok, $err) = attempt($unknown->addr, tls_mode => 'require');
like($tok, qr/^\d+$/, 'require: granted although no CA we trust signed the certificate')
  or diag $err;

# failures, each with its cause
($tok, $err) = attempt($unknown->addr, tls_mode => 'verify-ca');
is($tok, '', 'unknown CA: refused');
like($err, qr/\Q${\ $unknown->addr }\E: certificate verify failed: unable to get local issuer certificate/,
	'unknown CA: the detail says why');
like($err, qr/HINT:  A node's TLS connection failed: check redlock\.tls_mode and redlock\.tls_ca_file/,
	'... and the hint names the TLS settings');
($tok, $err) = attempt("localhost:${\ $wrong->port }", tls_mode => 'verify-full');
like($err, qr/localhost:\d+: certificate verify failed: hostname mismatch \(the certificate does not name "localhost"\)/,
	'verify-full: a certificate for another name is refused');
($tok, $err) = attempt($wrong->addr, tls_mode => 'verify-full');
like($err, qr/certificate verify failed: IP address mismatch \(the certificate does not name "127.0.0.1"\)/,
	'verify-full: a certificate without the IP is refused');
($tok, $err) = attempt($expired->addr, tls_mode => 'verify-full');
is($tok, '', 'expired certificate: refused');
like($err, qr/certificate verify failed: certificate has expired/, 'expired certificate: the detail says so');
# a plain Redis reads the ClientHello as an inline command that never ends
($tok, $err, $took) = attempt($plain->addr, tls_mode => 'require', connect_timeout => '1s');
is($tok, '', 'TLS to a plain-TCP Redis: refused');
like($err, qr/\Q${\ $plain->addr }\E: (TLS handshake failed: \S+|the server closed the connection during the TLS handshake|TLS handshake timed out after \d+ ms)/,
	'TLS to a plain-TCP Redis: the detail says the handshake failed');
note "TLS to a plain-TCP Redis: $err";
my $talker = FakeRedis->new(mode => 'unsolicited');
($tok, $err) = attempt($talker->addr, tls_mode => 'require');
like($err, qr/\Q${\ $talker->addr }\E: TLS handshake failed: error:\S+:SSL routines::(wrong version number|packet length too long)/,
	'TLS to a plain-TCP server that speaks first: OpenSSL\'s reason');
my $closer = FakeRedis->new(mode => 'close_on_connect');
($tok, $err) = attempt($closer->addr, tls_mode => 'require');
like($err, qr/\Q${\ $closer->addr }\E: the server closed the connection during the TLS handshake( \(Connection reset by peer\))?/,
	'a server that closes at once: closed during the handshake');
($tok, $err, $took) = attempt($silent->addr, tls_mode => 'require', connect_timeout => '1s');
is($tok, '', 'a server that never answers the handshake: refused');
like($err, qr/\Q${\ $silent->addr }\E: TLS handshake timed out after \d+ ms/,
	'... with a handshake timeout');
cmp_ok($took, '<', 8, "... within connect_timeout (${took}s)");

# client certificates
($tok, $err) = attempt($mtls->addr, tls_mode => 'verify-full');
is($tok, '', 'client certificate required, none given: refused');
like($err, qr/\Q${\ $mtls->addr }\E: .*certificate required/,
	'... and the detail says the server wanted a certificate');
like($err, qr/HINT:  .*redlock\.tls_cert_file and redlock\.tls_key_file for nodes that ask for a client certificate/,
	'... and the hint names the client certificate settings');
note "no client certificate: $err";
($tok, $err) = attempt($mtls->addr, tls_mode => 'verify-full',
	tls_cert_file => $tls->file('client.crt'),
	tls_key_file => $tls->file('client.key'));
like($tok, qr/^\d+$/, 'client certificate required and given: granted') or diag $err;

# AUTH over TLS
($tok, $err) = attempt($authed->addr, tls_mode => 'verify-full', password => 's3cret');
like($tok, qr/^\d+$/, 'AUTH over TLS: granted') or diag $err;
($tok, $err) = attempt($authed->addr, tls_mode => 'verify-full', password => 'wrong');
like($err, qr/authentication failed: WRONGPASS/, 'AUTH over TLS: a wrong password is named');

# settings: checked when set, or named at connect
my ($rc, $out);
($rc, $out, $err) = $pg->psql('postgres', "LOAD 'redlock'; SET redlock.tls_ca_file = '/nonexistent/ca.crt'");
like($err, qr/Could not open CA file "\/nonexistent\/ca.crt"/, 'a missing CA file is refused when set');
($rc, $out, $err) = $pg->psql('postgres', "LOAD 'redlock'; SET redlock.tls_key_file = '${\ $tls->file('client.crt') }'");
like($err, qr/holds no PEM "PRIVATE KEY" block/, 'a key file without a key is refused when set');
($rc, $out, $err) = $pg->psql('postgres', "LOAD 'redlock'; SET redlock.tls_mode = 'verify-everything'");
like($err, qr/invalid value for parameter "redlock.tls_mode"/, 'tls_mode takes libpq\'s words only');
($tok, $err) = attempt($mtls->addr, tls_mode => 'verify-full',
	tls_cert_file => $tls->file('server.crt'),
	tls_key_file => $tls->file('client.key'));
like($err, qr/could not load client key file ".*client.key": .*key values mismatch/,
	'a key that does not match the certificate is named at connect');

# figures for the record (no assertions): a new backend's first call pays
# for connect (and handshake), later calls reuse the connection
for my $mode ('disable', 'verify-full')
{
	my $node = $mode eq 'disable' ? $plain : $good;
	my $s = $pg->background_psql('postgres', on_error_stop => 1);
	$s->query_safe("SET redlock.nodes = 'localhost:${\ $node->port }'");
	$s->query_safe("SET redlock.tls_mode = '$mode'");
	$s->query_safe("SET redlock.tls_ca_file = '$ca'");
	my @ms;
	for my $i (1 .. 4)
	{
		my $t0 = time;
		$s->query_safe("SELECT redlock_try_lock('timing:$mode:$i', 5000)");
		push @ms, sprintf('%.1f', (time - $t0) * 1000);
	}
	note "tls_mode $mode: first call (connect) $ms[0] ms, then @ms[1..3] ms";
	$s->quit;
}

# SNI: an openssl s_server that prints the extensions it receives
{
	my $port = free_port();
	my ($in, $sout, $serr) = ('', '', '');
	my $srv = IPC::Run::start(
		[
			'openssl', 's_server', '-accept', "127.0.0.1:$port",
			'-cert', $tls->file('server.crt'), '-key', $tls->file('server.key'),
			'-tlsextdebug', '-naccept', '1'
		],
		\$in, \$sout, \$serr);
	for (1 .. 100)
	{
		last if $sout =~ /ACCEPT/;
		usleep(50_000);
		$srv->pump_nb;
	}
	($tok, $err) = attempt("localhost:$port", tls_mode => 'verify-full',
		node_timeout => '200ms');
	for (1 .. 100)
	{
		last if $sout =~ /server name/;
		usleep(20_000);
		$srv->pump_nb;
	}
	$srv->kill_kill;
	like($sout, qr/TLS client extension "server name".*\n.*localhost/,
		'SNI: the node\'s host name is sent');
}

# ---------------------------------------------------------------- names

($tok, $err) = attempt("localhost:${\ $plain->port }");
like($tok, qr/^\d+$/, 'a name from /etc/hosts (localhost): granted') or diag $err;
is($dns->queries('localhost'), 0, '... without asking the DNS server');

($tok, $err, $took) = attempt("nonexistent.invalid:${\ $plain->port }");
is($tok, '', 'a name that does not exist: refused');
like($err, qr/nonexistent\.invalid:\d+: could not resolve host name "nonexistent\.invalid": Domain name not found/,
	'... with a clear message');
cmp_ok($took, '<', 5, "... at once (${took}s)");

# every address is tried: ::1 first (nothing listens there), then 127.0.0.1
$dns->set('both.redlock.test' => [ '::1', '127.0.0.1' ]);
($tok, $err) = attempt("both.redlock.test:${\ $plain->port }");
like($tok, qr/^\d+$/, 'a name with an IPv6 and an IPv4 address: the one that listens is used')
  or diag $err;
($tok, $err) = attempt("both.redlock.test:${\ free_port() }");
like($err, qr/could not connect: Connection refused \(2 addresses tried\)/,
	'... and when none listens, both were tried');

# a node whose address changes is followed on reconnect
{
	my $port = free_port();
	my $v4 = RedisNode->new(port => $port);
	my $v6 = RedisNode->new(port => $port, host => '::1');
	$dns->set('moving.redlock.test' => ['127.0.0.1']);
	my $s = $pg->background_psql('postgres', on_error_stop => 0);
	$s->query_safe("SET redlock.nodes = 'moving.redlock.test:$port'");
	$s->query_safe("SELECT redlock_try_lock('move:1', 60000)");
	is($v4->cli('EXISTS', 'redlock:lock:move:1'), '1', 'the name first leads to 127.0.0.1');
	$dns->set('moving.redlock.test' => ['::1']);
	$v4->restart;    # the connection breaks; the backend reconnects
	my $res = $s->query("SELECT redlock_try_lock('move:2', 60000) IS NOT NULL");
	$res = $s->query("SELECT redlock_try_lock('move:2', 60000) IS NOT NULL") if $res ne 't';
	is($res, 't', 'granted after the address changed');
	is($v6->cli('EXISTS', 'redlock:lock:move:2'), '1', '... by the node at the new address (::1)');
	$s->quit;
	$v4->kill9;
	$v6->kill9;
}

# a resolver that never answers
my @ok = redis_nodes(3);
$dns->set(map { ("hang$_.redlock.test" => 'hang') } 1 .. 3);
my $p = $ok[0]->port;
my $two_hang = join(',', (map { $_->addr } @ok), "hang1.redlock.test:$p", "hang2.redlock.test:$p");
($tok, $err, $took) = attempt($two_hang, connect_timeout => '20s');
like($tok, qr/^\d+$/, 'two of five names never resolve: granted by the other three') or diag $err;
cmp_ok($took, '<', 10, "... without waiting for the resolver (${took}s, connect_timeout 20s)");
ok($dns->queries('hang1.redlock.test') > 0, '... and the lookup did reach our DNS server');

my $three_hang = join(',', (map { $_->addr } @ok[0, 1]), map { "hang$_.redlock.test:$p" } 1 .. 3);
($tok, $err, $took) = attempt($three_hang, connect_timeout => '1s');
is($tok, '', 'three of five names never resolve: refused');
like($err, qr/hang1\.redlock\.test:\d+: could not resolve host name "hang1\.redlock\.test": no answer after \d+ ms/,
	'... naming the lookup that had no answer');
cmp_ok($took, '<', 8, "... within connect_timeout (${took}s, connect_timeout 1s)");

# the backend's UDP sockets (the resolver's; the nodes' are TCP)
sub udp_sockets
{
	my ($pid) = @_;
	my %udp = map { $_->{inode} => 1 } net_sockets('udp');
	my %open = socket_inodes($pid);
	return scalar grep { $udp{$_} } keys %open;
}

# cancel and statement_timeout interrupt a lookup
{
	my $s = $pg->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe("SET redlock.nodes = '$three_hang'");
	$s->query_safe("SET redlock.connect_timeout = '60s'");
	$s->query_safe("SET statement_timeout = '500ms'");
	my $t0 = time;
	my $res = $s->query("SELECT redlock_lock('cancel:1', 5000)");
	my $t = time - $t0;
	like($s->{stderr}, qr/canceling statement due to statement timeout/,
		'statement_timeout interrupts a lookup that never ends');
	cmp_ok($t, '<', 10, "... promptly (${t}s)");
	$s->{stderr} = '';
	$s->query_safe("SET statement_timeout = 0");

	$s->{stdin} .= "SELECT redlock_lock('cancel:2', 5000);\n";
	$s->{run}->pump_nb;
	# the lookup is under way
	$pg->poll_query_until('postgres',
		"SELECT state = 'active' AND query LIKE '%cancel:2%' FROM pg_stat_activity WHERE pid = $pid")
	  or die 'the call did not start';
	$t0 = time;
	$pg->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
	my $done = $s->query('SELECT 1');
	$t = time - $t0;
	like($s->{stderr}, qr/canceling statement due to user request/,
		'pg_cancel_backend interrupts a lookup');
	cmp_ok($t, '<', 10, "... promptly (${t}s)");
	$s->{stderr} = '';

	$s->quit;

	# lookups that time out leave no resolver socket behind: after each
	# refused round, the backend holds no UDP socket
	$s = $pg->background_psql('postgres', on_error_stop => 0);
	$pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe("SET redlock.nodes = '$three_hang'");
	$s->query_safe("SET redlock.connect_timeout = '300ms'");
	my @udp;
	for my $round (1 .. 4)
	{
		$s->query("SELECT redlock_try_lock('leak:$round', 5000)");
		push @udp, udp_sockets($pid);
	}
	like($s->{stderr}, qr/could not resolve host name "hang1.redlock.test": no answer/,
		'the rounds were refused for want of an answer');
	is("@udp", '0 0 0 0', 'no resolver socket left open after rounds whose lookups timed out');
	$s->{stderr} = '';
	$s->quit;
}

$pg->stop;
done_testing();
