// Package node holds what every NSM component here shares: logging set from NSM_LOG_LEVEL,
// the SPIFFE X.509 source from the Workload API (SPIFFE_ENDPOINT_SOCKET), mTLS with any SPIFFE
// ID accepted, path tokens on every call, and file descriptors beside gRPC (grpcfd) — the way
// NSM's released commands wire NSM's sdk.
package node

import (
	"context"
	"crypto/tls"
	"os"
	"syscall"
	"time"

	"github.com/edwarnicke/grpcfd"
	"github.com/kelseyhightower/envconfig"
	"github.com/sirupsen/logrus"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/networkservicemesh/sdk/pkg/tools/log"
	"github.com/networkservicemesh/sdk/pkg/tools/log/logruslogger"
	"github.com/networkservicemesh/sdk/pkg/tools/spiffejwt"
	"github.com/networkservicemesh/sdk/pkg/tools/token"
)

// Env reads cfg from the NSM_* environment (envconfig, prefix "nsm"), exiting on an error.
func Env(cfg interface{}) {
	if err := envconfig.Process("nsm", cfg); err != nil {
		logrus.Fatalf("NSM_* environment: %v", err)
	}
}

// Logger sets the log level (NSM_LOG_LEVEL's value; SIGUSR1 → TRACE, SIGUSR2 → back) and
// returns ctx carrying the sdk's logger.
func Logger(ctx context.Context, name, level string) context.Context {
	l, err := logrus.ParseLevel(level)
	if err != nil {
		logrus.Fatalf("NSM_LOG_LEVEL %q: %v", level, err)
	}
	logrus.SetLevel(l)
	log.EnableTracing(true)
	ctx = log.WithLog(ctx, logruslogger.New(ctx, map[string]interface{}{"cmd": name}))
	logruslogger.SetupLevelChangeOnSignal(ctx, map[os.Signal]logrus.Level{
		syscall.SIGUSR1: logrus.TraceLevel,
		syscall.SIGUSR2: l,
	})
	return ctx
}

// Identity is this process's SVID source and what is built from it.
type Identity struct {
	Source *workloadapi.X509Source
	Tokens token.GeneratorFunc
}

// NewIdentity waits for this process's SVID from the Workload API.
func NewIdentity(ctx context.Context, maxTokenLifetime time.Duration) *Identity {
	source, err := workloadapi.NewX509Source(ctx)
	if err != nil {
		log.FromContext(ctx).Fatalf("no X.509 source from the Workload API: %v", err)
	}
	svid, err := source.GetX509SVID()
	if err != nil {
		log.FromContext(ctx).Fatalf("no X.509 SVID: %v", err)
	}
	log.FromContext(ctx).Infof("SVID: %q", svid.ID)
	return &Identity{Source: source, Tokens: spiffejwt.TokenGeneratorFunc(source, maxTokenLifetime)}
}

func (id *Identity) clientTLS() *tls.Config {
	c := tlsconfig.MTLSClientConfig(id.Source, id.Source, tlsconfig.AuthorizeAny())
	c.MinVersion = tls.VersionTLS12
	return c
}

// ServerOptions: mTLS (any SPIFFE ID), with fds received beside the calls.
func (id *Identity) ServerOptions() []grpc.ServerOption {
	c := tlsconfig.MTLSServerConfig(id.Source, id.Source, tlsconfig.AuthorizeAny())
	c.MinVersion = tls.VersionTLS12
	return []grpc.ServerOption{grpc.Creds(grpcfd.TransportCredentials(credentials.NewTLS(c)))}
}

// DialOptions: mTLS, a path token on every call, fds sent beside the calls; extra are appended.
func (id *Identity) DialOptions(extra ...grpc.DialOption) []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(grpcfd.TransportCredentials(credentials.NewTLS(id.clientTLS()))),
		grpc.WithDefaultCallOptions(
			grpc.WaitForReady(true),
			grpc.PerRPCCredentials(token.NewPerRPCCredentials(id.Tokens)),
		),
		grpcfd.WithChainStreamInterceptor(),
		grpcfd.WithChainUnaryInterceptor(),
	}
	return append(opts, extra...)
}

// Serving logs a server's end and cancels the process's context with it.
func Serving(ctx context.Context, cancel context.CancelFunc, what string, errs <-chan error) {
	select {
	case err := <-errs:
		log.FromContext(ctx).Fatalf("%s: %v", what, err)
	default:
	}
	go func() {
		if err, ok := <-errs; ok && err != nil {
			log.FromContext(ctx).Errorf("%s: %v", what, err)
		}
		cancel()
	}()
}
