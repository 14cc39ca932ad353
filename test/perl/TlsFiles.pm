# Certificates for the TLS tests, made with the openssl command line: a CA,
# server certificates signed by it (right name, wrong name, expired), one
# signed by another CA, and a client certificate.
#
#   my $tls = TlsFiles->new;          # everything, in a fresh directory
#   $tls->file('server.crt')          # path of a file
#   $tls->node('server')              # a Redis node with TLS (RedisNode)
package TlsFiles;

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Utils;
use RedisNode;

sub new
{
	my ($class) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir('tls');
	my $self = bless { dir => $dir }, $class;
	$self->_make;
	return $self;
}

sub file { return "$_[0]->{dir}/$_[1]"; }

sub _run
{
	my ($self, $cmd) = @_;
	my $out = `cd '$self->{dir}' && $cmd 2>&1`;
	die "failed: $cmd\n$out" if $? != 0;
}

sub _ca
{
	my ($self, $name, $cn) = @_;
	$self->_run("openssl req -x509 -new -nodes -newkey rsa:2048 -sha256 -days 30 "
		  . "-keyout $name.key -out $name.crt -subj '/CN=$cn' "
		  . "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign");
	mkdir "$self->{dir}/$name.db";
	open my $fh, '>', "$self->{dir}/$name.db/index.txt" or die;
	close $fh;
	open $fh, '>', "$self->{dir}/$name.db/serial" or die;
	print $fh "1000\n";
	close $fh;
	open $fh, '>', "$self->{dir}/$name.cnf" or die;
	print $fh <<"EOC";
[ ca ]
default_ca = this_ca
[ this_ca ]
dir = $self->{dir}
database = \$dir/$name.db/index.txt
new_certs_dir = \$dir/$name.db
serial = \$dir/$name.db/serial
certificate = \$dir/$name.crt
private_key = \$dir/$name.key
default_md = sha256
policy = any_name
unique_subject = no
copy_extensions = copy
[ any_name ]
commonName = supplied
EOC
	close $fh;
}

# a key and a certificate signed by $ca; %opt: san, client, start, end
sub _cert
{
	my ($self, $name, $ca, $cn, %opt) = @_;
	my $ext = $opt{client} ? 'extendedKeyUsage=clientAuth' : 'extendedKeyUsage=serverAuth';
	my $add = "-addext '$ext'";
	$add .= " -addext 'subjectAltName=$opt{san}'" if $opt{san};
	$self->_run("openssl req -new -nodes -newkey rsa:2048 -keyout $name.key "
		  . "-out $name.csr -subj '/CN=$cn' $add");
	my $dates = $opt{start}
	  ? "-startdate $opt{start} -enddate $opt{end}"
	  : '-days 30';
	$self->_run("openssl ca -batch -notext -config $ca.cnf $dates -in $name.csr -out $name.crt");
	chmod 0600, "$self->{dir}/$name.key";
}

sub _make
{
	my ($self) = @_;
	$self->_ca('ca', 'redlock test CA');
	$self->_ca('otherca', 'some other CA');
	$self->_cert('server', 'ca', 'localhost', san => 'DNS:localhost,IP:127.0.0.1');
	$self->_cert('wrongname', 'ca', 'wrong.example', san => 'DNS:wrong.example');
	$self->_cert('expired', 'ca', 'localhost', san => 'DNS:localhost,IP:127.0.0.1',
		start => '20200101000000Z', end => '20200201000000Z');
	$self->_cert('unknownca', 'otherca', 'localhost', san => 'DNS:localhost,IP:127.0.0.1');
	$self->_cert('client', 'ca', 'redlock client', client => 1);
}

# A real Redis node that speaks only TLS, with the certificate $cert
# ('server', 'wrongname'...) signed by our CA; it trusts that CA for client
# certificates.  %opt: auth_clients ('no' unless given: 'yes' wants a client
# certificate), args (more redis-server arguments).
sub node
{
	my ($self, $cert, %opt) = @_;
	return RedisNode->new(
		tls => {
			cert => $self->file("$cert.crt"),
			key => $self->file("$cert.key"),
			ca => $self->file('ca.crt'),
			auth_clients => $opt{auth_clients} // 'no',
			client_cert => $self->file('client.crt'),
			client_key => $self->file('client.key'),
		},
		args => $opt{args} // []);
}

1;
