// registry-memory: NSM's in-memory registry (sdk registry/chains/memory) of network services
// and endpoints, configured as NSM's registry-memory command is (NSM_LISTEN_ON,
// NSM_EXPIRE_PERIOD, NSM_MAX_TOKEN_LIFETIME, NSM_REGISTRY_*_POLICIES, NSM_LOG_LEVEL).
package main

import (
	"context"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/networkservicemesh/sdk/pkg/registry/chains/memory"
	"github.com/networkservicemesh/sdk/pkg/registry/common/authorize"
	"github.com/networkservicemesh/sdk/pkg/tools/grpcutils"
	"github.com/networkservicemesh/sdk/pkg/tools/log"

	"quiver.interop/nsm/internal/node"
)

type config struct {
	ListenOn               []url.URL     `default:"unix:///listen.on.socket" split_words:"true"`
	MaxTokenLifetime       time.Duration `default:"10m" split_words:"true"`
	RegistryServerPolicies []string      `default:"etc/nsm/opa/common/.*.rego,etc/nsm/opa/registry/.*.rego,etc/nsm/opa/server/.*.rego" split_words:"true"`
	RegistryClientPolicies []string      `default:"etc/nsm/opa/common/.*.rego,etc/nsm/opa/registry/.*.rego,etc/nsm/opa/client/.*.rego" split_words:"true"`
	ProxyRegistryURL       url.URL       `split_words:"true"`
	ExpirePeriod           time.Duration `default:"1s" split_words:"true"`
	LogLevel               string        `default:"INFO" split_words:"true"`
}

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer cancel()
	var c config
	node.Env(&c)
	ctx = node.Logger(ctx, "registry-memory", c.LogLevel)
	start := time.Now()
	log.FromContext(ctx).Infof("config: %+v", c)
	id := node.NewIdentity(ctx, c.MaxTokenLifetime)

	server := grpc.NewServer(id.ServerOptions()...)
	memory.NewServer(ctx, id.Tokens,
		memory.WithAuthorizeNSERegistryServer(authorize.NewNetworkServiceEndpointRegistryServer(authorize.WithPolicies(c.RegistryServerPolicies...))),
		memory.WithAuthorizeNSERegistryClient(authorize.NewNetworkServiceEndpointRegistryClient(authorize.WithPolicies(c.RegistryClientPolicies...))),
		memory.WithAuthorizeNSRegistryServer(authorize.NewNetworkServiceRegistryServer(authorize.WithPolicies(c.RegistryServerPolicies...))),
		memory.WithAuthorizeNSRegistryClient(authorize.NewNetworkServiceRegistryClient(authorize.WithPolicies(c.RegistryClientPolicies...))),
		memory.WithDefaultExpiration(time.Minute),
		memory.WithProxyRegistryURL(&c.ProxyRegistryURL),
		memory.WithDialOptions(id.DialOptions(grpc.WithBlock())...),
	).Register(server)
	for i := range c.ListenOn {
		node.Serving(ctx, cancel, "serving "+c.ListenOn[i].String(), grpcutils.ListenAndServe(ctx, &c.ListenOn[i], server))
	}
	log.FromContext(ctx).Infof("startup completed in %v", time.Since(start))
	<-ctx.Done()
}
