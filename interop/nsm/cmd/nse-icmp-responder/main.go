// nse-icmp-responder: an NSM endpoint (sdk networkservice/chains/endpoint) that hands out
// addresses from NSM_CIDR_PREFIX (groupipam; NSM_IPAM_POLICY polite or strict), policy routes
// from NSM_PBR_CONFIG_PATH, DNS configs from NSM_DNS_CONFIGS, and accepts the KERNEL mechanism
// (the forwarder builds the interface in this process's namespace, which nothing else here
// touches: the kernel answers the pings). Registers its service(s) and itself with the nsmgr at
// NSM_CONNECT_TO, its own namespace and socket passed by fd. Configured as NSM's
// icmp-responder command is.
package main

import (
	"context"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pkg/errors"
	"google.golang.org/grpc"
	"gopkg.in/yaml.v2"

	"github.com/networkservicemesh/api/pkg/api/networkservice"
	kernelmech "github.com/networkservicemesh/api/pkg/api/networkservice/mechanisms/kernel"
	"github.com/networkservicemesh/api/pkg/api/networkservice/mechanisms/noop"
	registryapi "github.com/networkservicemesh/api/pkg/api/registry"

	"github.com/networkservicemesh/sdk/pkg/networkservice/chains/endpoint"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/authorize"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/mechanisms"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/mechanisms/kernel"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/mechanisms/sendfd"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/null"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/policyroute"
	"github.com/networkservicemesh/sdk/pkg/networkservice/connectioncontext/dnscontext"
	"github.com/networkservicemesh/sdk/pkg/networkservice/ipam/groupipam"
	"github.com/networkservicemesh/sdk/pkg/networkservice/ipam/strictipam"
	registryclient "github.com/networkservicemesh/sdk/pkg/registry/chains/client"
	registryauthorize "github.com/networkservicemesh/sdk/pkg/registry/common/authorize"
	"github.com/networkservicemesh/sdk/pkg/registry/common/clientinfo"
	registrysendfd "github.com/networkservicemesh/sdk/pkg/registry/common/sendfd"
	"github.com/networkservicemesh/sdk/pkg/tools/cidr"
	"github.com/networkservicemesh/sdk/pkg/tools/dnsconfig"
	"github.com/networkservicemesh/sdk/pkg/tools/fs"
	"github.com/networkservicemesh/sdk/pkg/tools/grpcutils"
	"github.com/networkservicemesh/sdk/pkg/tools/log"

	"quiver.interop/nsm/internal/node"
)

// ipamPolicy decodes NSM_IPAM_POLICY.
type ipamPolicy string

func (p *ipamPolicy) Decode(v string) error {
	switch strings.ToLower(v) {
	case "polite", "strict":
		*p = ipamPolicy(strings.ToLower(v))
		return nil
	}
	return errors.Errorf("not an IPAM policy: %q (polite or strict)", v)
}

func (p ipamPolicy) server(groups cidr.Groups) networkservice.NetworkServiceServer {
	if p != "strict" {
		return groupipam.NewServer(groups)
	}
	var all []*net.IPNet
	for _, g := range groups {
		all = append(all, g...)
	}
	return strictipam.NewServer(func(...*net.IPNet) networkservice.NetworkServiceServer {
		return groupipam.NewServer(groups)
	}, all...)
}

type config struct {
	Name                   string            `default:"icmp-server"`
	ConnectTo              url.URL           `default:"unix:///var/lib/networkservicemesh/nsm.io.sock" split_words:"true"`
	MaxTokenLifetime       time.Duration     `default:"10m" split_words:"true"`
	RegistryClientPolicies []string          `default:"etc/nsm/opa/common/.*.rego,etc/nsm/opa/registry/.*.rego,etc/nsm/opa/client/.*.rego" split_words:"true"`
	IPAMPolicy             ipamPolicy        `default:"polite" split_words:"true"`
	ServiceNames           []string          `default:"icmp-responder" split_words:"true"`
	Payload                string            `default:"ETHERNET" split_words:"true"`
	Labels                 map[string]string `default:""`
	DNSConfigs             dnsconfig.Decoder `default:"[]" split_words:"true"`
	CidrPrefix             cidr.Groups       `default:"169.254.0.0/16" split_words:"true"`
	RegisterService        bool              `default:"true" split_words:"true"`
	UnregisterItself       bool              `default:"false" split_words:"true"`
	PBRConfigPath          string            `default:"/etc/policy-based-routing/config.yaml" split_words:"true"`
	LogLevel               string            `default:"INFO" split_words:"true"`
}

// policies follows the policy-based-routing file (a YAML list of PolicyRoute); none while it
// is missing.
func policies(ctx context.Context, path string) func() []*networkservice.PolicyRoute {
	var current atomic.Value
	current.Store([]*networkservice.PolicyRoute{})
	load := func(b []byte) {
		var routes []*networkservice.PolicyRoute
		if b != nil {
			if err := yaml.Unmarshal(b, &routes); err != nil {
				log.FromContext(ctx).Errorf("policy-based routing %s: %v", path, err)
				return
			}
		}
		current.Store(routes)
	}
	updates := fs.WatchFile(ctx, path)
	load(<-updates)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case b := <-updates:
				load(b)
			}
		}
	}()
	return func() []*networkservice.PolicyRoute { return current.Load().([]*networkservice.PolicyRoute) }
}

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer cancel()
	var c config
	node.Env(&c)
	ctx = node.Logger(ctx, "nse-icmp-responder", c.LogLevel)
	start := time.Now()
	log.FromContext(ctx).Infof("config: %+v", c)
	id := node.NewIdentity(ctx, c.MaxTokenLifetime)

	ep := endpoint.NewServer(ctx, id.Tokens,
		endpoint.WithName(c.Name),
		endpoint.WithAuthorizeServer(authorize.NewServer()),
		endpoint.WithAdditionalFunctionality(
			c.IPAMPolicy.server(c.CidrPrefix),
			policyroute.NewServer(policies(ctx, c.PBRConfigPath)),
			mechanisms.NewServer(map[string]networkservice.NetworkServiceServer{
				kernelmech.MECHANISM: kernel.NewServer(),
				noop.MECHANISM:       null.NewServer(),
			}),
			dnscontext.NewServer(c.DNSConfigs...),
			sendfd.NewServer(),
		),
	)
	server := grpc.NewServer(id.ServerOptions()...)
	ep.Register(server)
	dir, err := os.MkdirTemp("", c.Name)
	if err != nil {
		log.FromContext(ctx).Fatalf("temp dir: %v", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	listenOn := &url.URL{Scheme: "unix", Path: filepath.Join(dir, "listen.on")}
	node.Serving(ctx, cancel, "serving "+listenOn.String(), grpcutils.ListenAndServe(ctx, listenOn, server))

	dial := id.DialOptions(grpc.WithBlock())
	if c.RegisterService {
		for _, name := range c.ServiceNames {
			ns := registryclient.NewNetworkServiceRegistryClient(ctx,
				registryclient.WithClientURL(&c.ConnectTo),
				registryclient.WithDialOptions(dial...),
				registryclient.WithAuthorizeNSRegistryClient(registryauthorize.NewNetworkServiceRegistryClient(registryauthorize.WithPolicies(c.RegistryClientPolicies...))))
			if _, err := ns.Register(ctx, &registryapi.NetworkService{Name: name, Payload: c.Payload}); err != nil {
				log.FromContext(ctx).Fatalf("registering service %s: %v", name, err)
			}
		}
	}
	nses := registryclient.NewNetworkServiceEndpointRegistryClient(ctx,
		registryclient.WithClientURL(&c.ConnectTo),
		registryclient.WithDialOptions(dial...),
		registryclient.WithNSEAdditionalFunctionality(
			clientinfo.NewNetworkServiceEndpointRegistryClient(),
			registrysendfd.NewNetworkServiceEndpointRegistryClient(),
		),
		registryclient.WithAuthorizeNSERegistryClient(registryauthorize.NewNetworkServiceEndpointRegistryClient(registryauthorize.WithPolicies(c.RegistryClientPolicies...))))
	me := &registryapi.NetworkServiceEndpoint{
		Name:                 c.Name,
		NetworkServiceNames:  c.ServiceNames,
		NetworkServiceLabels: map[string]*registryapi.NetworkServiceLabels{},
		Url:                  listenOn.String(),
	}
	for _, name := range c.ServiceNames {
		me.NetworkServiceLabels[name] = &registryapi.NetworkServiceLabels{Labels: c.Labels}
	}
	registered, err := nses.Register(ctx, me)
	if err != nil {
		log.FromContext(ctx).Fatalf("registering endpoint: %v", err)
	}
	log.FromContext(ctx).Infof("registered as %+v", registered)
	log.FromContext(ctx).Infof("startup completed in %v", time.Since(start))
	<-ctx.Done()
	if c.UnregisterItself {
		if _, err := nses.Unregister(context.Background(), registered); err != nil {
			log.FromContext(ctx).Errorf("unregistering: %v", err)
		}
	}
}
