// nsmgr: NSM's per-node manager (sdk networkservice/chains/nsmgr), configured as NSM's nsmgr
// command is (NSM_NAME, NSM_LISTEN_ON, NSM_REGISTRY_URL, NSM_MAX_TOKEN_LIFETIME,
// NSM_DIAL_TIMEOUT, NSM_FORWARDER_NETWORK_SERVICE_NAME, NSM_REGISTRY_*_POLICIES, NSM_LOG_LEVEL).
// It finds forwarders on its node as endpoints of the forwarder service registered with it.
package main

import (
	"context"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path"
	"syscall"
	"time"

	"github.com/edwarnicke/genericsync"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc"

	"github.com/networkservicemesh/sdk/pkg/networkservice/chains/nsmgr"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/authorize"
	registryauthorize "github.com/networkservicemesh/sdk/pkg/registry/common/authorize"
	"github.com/networkservicemesh/sdk/pkg/tools/grpcutils"
	"github.com/networkservicemesh/sdk/pkg/tools/listenonurl"
	"github.com/networkservicemesh/sdk/pkg/tools/log"
	authmonitor "github.com/networkservicemesh/sdk/pkg/tools/monitorconnection/authorize"

	"quiver.interop/nsm/internal/node"
)

type config struct {
	Name                        string        `default:"nmgr"`
	ListenOn                    []url.URL     `default:"unix:///var/lib/networkservicemesh/nsm.io.sock" split_words:"true"`
	RegistryURL                 url.URL       `default:"tcp://localhost:5001" split_words:"true"`
	MaxTokenLifetime            time.Duration `default:"10m" split_words:"true"`
	RegistryServerPolicies      []string      `default:"etc/nsm/opa/common/.*.rego,etc/nsm/opa/registry/.*.rego,etc/nsm/opa/server/.*.rego" split_words:"true"`
	RegistryClientPolicies      []string      `default:"etc/nsm/opa/common/.*.rego,etc/nsm/opa/registry/.*.rego,etc/nsm/opa/client/.*.rego" split_words:"true"`
	LogLevel                    string        `default:"INFO" split_words:"true"`
	DialTimeout                 time.Duration `default:"750ms" split_words:"true"`
	ForwarderNetworkServiceName string        `default:"forwarder" split_words:"true"`
}

// publicURL: the tcp:// listen address if there is one (with a routable host when it listens on
// all addresses), else the first.
func publicURL(ctx context.Context, listenOn []url.URL) *url.URL {
	u := &listenOn[0]
	for i := range listenOn {
		if listenOn[i].Scheme == "tcp" {
			u = &listenOn[i]
			break
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		log.FromContext(ctx).Warn(err.Error())
		return u
	}
	return listenonurl.GetPublicURL(addrs, u)
}

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer cancel()
	var c config
	node.Env(&c)
	ctx = node.Logger(ctx, "nsmgr", c.LogLevel)
	start := time.Now()
	log.FromContext(ctx).Infof("config: %+v", c)
	id := node.NewIdentity(ctx, c.MaxTokenLifetime)

	// Connections are authorized per SPIFFE ID, Requests and MonitorConnections alike.
	byID := genericsync.Map[spiffeid.ID, *genericsync.Map[string, struct{}]]{}
	opts := []nsmgr.Option{
		nsmgr.WithName(c.Name),
		nsmgr.WithURL(publicURL(ctx, c.ListenOn).String()),
		nsmgr.WithAuthorizeServer(authorize.NewServer(authorize.WithSpiffeIDConnectionMap(&byID))),
		nsmgr.WithAuthorizeMonitorConnectionServer(authmonitor.NewMonitorConnectionServer(authmonitor.WithSpiffeIDConnectionMap(&byID))),
		nsmgr.WithAuthorizeNSERegistryServer(registryauthorize.NewNetworkServiceEndpointRegistryServer(registryauthorize.WithPolicies(c.RegistryServerPolicies...))),
		nsmgr.WithAuthorizeNSERegistryClient(registryauthorize.NewNetworkServiceEndpointRegistryClient(registryauthorize.WithPolicies(c.RegistryClientPolicies...))),
		nsmgr.WithAuthorizeNSRegistryServer(registryauthorize.NewNetworkServiceRegistryServer(registryauthorize.WithPolicies(c.RegistryServerPolicies...))),
		nsmgr.WithAuthorizeNSRegistryClient(registryauthorize.NewNetworkServiceRegistryClient(registryauthorize.WithPolicies(c.RegistryClientPolicies...))),
		nsmgr.WithDialTimeout(c.DialTimeout),
		nsmgr.WithForwarderServiceName(c.ForwarderNetworkServiceName),
		nsmgr.WithDialOptions(id.DialOptions(grpc.WithBlock())...),
	}
	if c.RegistryURL.String() != "" {
		opts = append(opts, nsmgr.WithRegistry(&c.RegistryURL))
	}
	mgr := nsmgr.NewServer(ctx, id.Tokens, opts...)

	server := grpc.NewServer(id.ServerOptions()...)
	mgr.Register(server)
	for i := range c.ListenOn {
		u := &c.ListenOn[i]
		if u.Scheme == "unix" {
			dir, _ := path.Split(u.Path)
			_ = os.MkdirAll(dir, 0o755)
		}
		node.Serving(ctx, cancel, "serving "+u.String(), grpcutils.ListenAndServe(ctx, u, server))
		log.FromContext(ctx).Infof("listening on %s", u)
	}
	log.FromContext(ctx).Infof("startup completed in %v", time.Since(start))
	<-ctx.Done()
	server.Stop()
}
