"""How a client authenticates to the daemon and trusts it: a bearer token
(sent as `authorization: Bearer TOKEN` metadata on every call) and TLS (for
TCP addresses only: the daemon's unix socket never uses TLS).

    Security(token=None, token_file=None, tls_ca=None, client_cert=None,
             client_key=None, tls_server_name=None)
      token            the token itself (prefer token_file: it stays out of
                       command lines and code)
      token_file       a file holding the token (one trailing newline is
                       stripped)
      tls_ca           PEM file of the CA(s) to verify the daemon's certificate
                       with: TCP connections (gRPC and the data socket) use
                       TLS when it is given
      client_cert,     PEM client certificate and key, for daemons that ask
      client_key       for one (mutual TLS)
      tls_server_name  the name to check the daemon's certificate against,
                       when it is not the host of the address

Security.from_env() reads $CONVEYOR_TOKEN_FILE, $CONVEYOR_TLS_CA,
$CONVEYOR_CLIENT_CERT, $CONVEYOR_CLIENT_KEY and $CONVEYOR_TLS_SERVER_NAME; it
is what every API uses when given no security of its own. The token is
never part of an error message or repr.
"""

import os
import ssl

import grpc

from .errors import InvalidRequest

_ENV = {"token_file": "CONVEYOR_TOKEN_FILE", "tls_ca": "CONVEYOR_TLS_CA",
        "client_cert": "CONVEYOR_CLIENT_CERT", "client_key": "CONVEYOR_CLIENT_KEY",
        "tls_server_name": "CONVEYOR_TLS_SERVER_NAME"}


def _read(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InvalidRequest("cannot read the %s %s: %s" % (what, path, e.strerror)) from None


def is_unix_target(target):
    return target.startswith("unix:") or target.startswith("unix-abstract:")


class _TokenInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                        grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the authorization metadata to every call of a channel."""

    def __init__(self, token):
        self._header = ("authorization", "Bearer " + token)

    def _details(self, details):
        metadata = list(details.metadata or []) + [self._header]
        return details._replace(metadata=metadata) if hasattr(details, "_replace") else \
            _CallDetails(details, metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._details(details), requests)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, details, metadata):
        self.method = details.method
        self.timeout = details.timeout
        self.metadata = metadata
        self.credentials = details.credentials
        self.wait_for_ready = getattr(details, "wait_for_ready", None)
        self.compression = getattr(details, "compression", None)


class Security:
    """See the module's docstring."""

    def __init__(self, token=None, token_file=None, tls_ca=None, client_cert=None,
                 client_key=None, tls_server_name=None):
        if token is not None and token_file is not None:
            raise InvalidRequest("give token or token_file, not both")
        if token_file is not None:
            token = _read(token_file, "token file").decode("ascii", "replace")
            if token.endswith("\n"):
                token = token[:-1]
            if token.endswith("\r"):
                token = token[:-1]
            if not token:
                raise InvalidRequest("the token file %s is empty" % token_file)
        if token is not None and (not token or any(c <= " " or c > "~" for c in token)):
            raise InvalidRequest("a token is one line of printable ASCII without spaces")
        if (client_cert is None) != (client_key is None):
            raise InvalidRequest("give client_cert and client_key together")
        if client_cert is not None and tls_ca is None:
            raise InvalidRequest("client_cert needs tls_ca (client certificates are sent over TLS)")
        self._token = token
        self.tls_ca = tls_ca
        self.client_cert = client_cert
        self.client_key = client_key
        self.tls_server_name = tls_server_name

    @classmethod
    def from_env(cls, environ=None):
        env = os.environ if environ is None else environ
        return cls(**{k: env[v] for k, v in _ENV.items() if env.get(v)})

    @property
    def has_token(self):
        return self._token is not None

    @property
    def tls(self):
        return self.tls_ca is not None

    def __repr__(self):
        return "Security(token=%s, tls_ca=%r, client_cert=%r, tls_server_name=%r)" % (
            "<set>" if self._token else None, self.tls_ca, self.client_cert, self.tls_server_name)

    def channel(self, target, options):
        """A gRPC channel to `target`: TLS when tls_ca is set and the target is
        TCP; the token on every call when there is one."""
        options = list(options)
        if self.tls and not is_unix_target(target):
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(self.tls_ca, "TLS CA file"),
                private_key=_read(self.client_key, "client key") if self.client_key else None,
                certificate_chain=_read(self.client_cert, "client certificate")
                if self.client_cert else None)
            if self.tls_server_name:
                options.append(("grpc.ssl_target_name_override", self.tls_server_name))
            channel = grpc.secure_channel(target, creds, options=options)
        else:
            channel = grpc.insecure_channel(target, options=options)
        if self._token is not None:
            channel = grpc.intercept_channel(channel, _TokenInterceptor(self._token))
        return channel

    def data_socket_context(self):
        """The ssl.SSLContext for the data socket of a TLS daemon, or None
        without TLS."""
        if not self.tls:
            return None
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.tls_ca)
        except (OSError, ssl.SSLError) as e:
            raise InvalidRequest("cannot use the TLS CA file %s: %s" % (self.tls_ca, e)) from None
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.client_cert:
            try:
                ctx.load_cert_chain(self.client_cert, self.client_key)
            except (OSError, ssl.SSLError) as e:
                raise InvalidRequest("cannot use the client certificate %s / key %s: %s"
                                     % (self.client_cert, self.client_key, e)) from None
        return ctx
