// nse-remote-vlan: an NSM endpoint (sdk networkservice/chains/endpoint) for networks reached
// over a VLAN of a host interface, configured as NSM's cmd-nse-remote-vlan is: it serves the
// REMOTE VLAN mechanism only, answering each Request with the VLAN of its network service
// (`vlan-id`) and the `via` label the forwarder's device selector maps to a host interface,
// the MTU left to the forwarder (zeroed), and one address per client from NSM_CIDR_PREFIX
// (groupipam over singlepointipam: the clients share the VLAN's subnet). It builds nothing
// itself: the forwarder tags the client's frames on the host interface. Listens on tcp://
// (NSM_LISTEN_ON) and registers its services and itself with the registry at NSM_CONNECT_TO.
//
// NSM_SERVICES is a comma-separated list of `NAME { vlan: ID; via: LABEL; labels: k=v&k=v }`.
package main

import (
	"context"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pkg/errors"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/networkservicemesh/api/pkg/api/networkservice"
	vlanmech "github.com/networkservicemesh/api/pkg/api/networkservice/mechanisms/vlan"
	"github.com/networkservicemesh/api/pkg/api/networkservice/payload"
	registryapi "github.com/networkservicemesh/api/pkg/api/registry"

	"github.com/networkservicemesh/sdk/pkg/networkservice/chains/endpoint"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/authorize"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/mechanisms"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/mechanisms/recvfd"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/mechanisms/sendfd"
	"github.com/networkservicemesh/sdk/pkg/networkservice/core/next"
	"github.com/networkservicemesh/sdk/pkg/networkservice/ipam/groupipam"
	"github.com/networkservicemesh/sdk/pkg/networkservice/ipam/singlepointipam"
	registryclient "github.com/networkservicemesh/sdk/pkg/registry/chains/client"
	registryauthorize "github.com/networkservicemesh/sdk/pkg/registry/common/authorize"
	"github.com/networkservicemesh/sdk/pkg/registry/common/clientinfo"
	registrysendfd "github.com/networkservicemesh/sdk/pkg/registry/common/sendfd"
	"github.com/networkservicemesh/sdk/pkg/tools/cidr"
	"github.com/networkservicemesh/sdk/pkg/tools/grpcutils"
	"github.com/networkservicemesh/sdk/pkg/tools/log"

	"quiver.interop/nsm/internal/node"
)

// viaLabel is the connection label the forwarder's device selector matches (sdk-vpp's).
const viaLabel = "via"

// service is one entry of NSM_SERVICES.
type service struct {
	name   string
	vlan   uint32
	via    string
	labels map[string]string
}

// services decodes NSM_SERVICES.
type services []service

func (s *services) Decode(v string) error {
	*s = nil
	for _, entry := range strings.Split(v, ",") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		svc, err := parseService(entry)
		if err != nil {
			return err
		}
		*s = append(*s, svc)
	}
	return nil
}

// parseService reads `NAME { vlan: ID; via: LABEL; labels: k=v&k=v }`.
func parseService(entry string) (service, error) {
	open, closing := strings.Index(entry, "{"), strings.LastIndex(entry, "}")
	if open < 0 || closing < open {
		return service{}, errors.Errorf("NSM_SERVICES: %q is not NAME { key: value; ... }", entry)
	}
	svc := service{name: strings.TrimSpace(entry[:open]), labels: map[string]string{}}
	for _, field := range strings.Split(entry[open+1:closing], ";") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		key, value, ok := strings.Cut(field, ":")
		if !ok {
			return service{}, errors.Errorf("NSM_SERVICES: %q: %q is not key: value", entry, field)
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case "vlan":
			id, err := strconv.ParseUint(value, 0, 12)
			if err != nil {
				return service{}, errors.Errorf("NSM_SERVICES: %q: vlan %q is not 0 to 4095", entry, value)
			}
			svc.vlan = uint32(id)
		case "via":
			svc.via = value
		case "labels":
			for _, kv := range strings.Split(value, "&") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return service{}, errors.Errorf("NSM_SERVICES: %q: label %q is not k=v", entry, kv)
				}
				svc.labels[k] = v
			}
		case "domain":
		default:
			return service{}, errors.Errorf("NSM_SERVICES: %q: unknown key %q", entry, key)
		}
	}
	if svc.name == "" || svc.via == "" {
		return service{}, errors.Errorf("NSM_SERVICES: %q needs a name and a via", entry)
	}
	return svc, nil
}

type config struct {
	Name                   string        `default:"vlan-server"`
	ConnectTo              url.URL       `default:"nsm-registry-svc:5002" split_words:"true"`
	MaxTokenLifetime       time.Duration `default:"24h" split_words:"true"`
	RegistryClientPolicies []string      `default:"etc/nsm/opa/common/.*.rego,etc/nsm/opa/registry/.*.rego,etc/nsm/opa/client/.*.rego" split_words:"true"`
	CidrPrefix             cidr.Groups   `default:"169.254.0.0/16" split_words:"true"`
	RegisterService        bool          `default:"true" split_words:"true"`
	ListenOn               url.URL       `default:"tcp://:5003" split_words:"true"`
	LogLevel               string        `default:"INFO" split_words:"true"`
	Services               services      `default:""`
}

// vlanServer answers the VLAN mechanism: the service's VLAN and via label, no MTU.
type vlanServer struct{ byName map[string]service }

func (v *vlanServer) Request(ctx context.Context, request *networkservice.NetworkServiceRequest) (*networkservice.Connection, error) {
	conn := request.GetConnection()
	svc, ok := v.byName[conn.GetNetworkService()]
	if !ok {
		return nil, errors.Errorf("network service %q is not served here", conn.GetNetworkService())
	}
	if m := vlanmech.ToMechanism(conn.GetMechanism()); m != nil {
		m.SetVlanID(svc.vlan)
		conn.Labels = map[string]string{viaLabel: svc.via}
	}
	if conn.GetContext() == nil {
		conn.Context = &networkservice.ConnectionContext{}
	}
	// The forwarder knows the host interface's MTU; the endpoint does not.
	conn.GetContext().MTU = 0
	return next.Server(ctx).Request(ctx, request)
}

func (v *vlanServer) Close(ctx context.Context, conn *networkservice.Connection) (*emptypb.Empty, error) {
	return next.Server(ctx).Close(ctx, conn)
}

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer cancel()
	var c config
	node.Env(&c)
	ctx = node.Logger(ctx, "nse-remote-vlan", c.LogLevel)
	start := time.Now()
	log.FromContext(ctx).Infof("config: %+v", c)
	if c.ListenOn.Scheme != "tcp" {
		log.FromContext(ctx).Fatalf("NSM_LISTEN_ON %s: only tcp:// is served (the forwarders of other nodes dial it)", c.ListenOn.String())
	}
	id := node.NewIdentity(ctx, c.MaxTokenLifetime)

	byName := map[string]service{}
	for _, s := range c.Services {
		byName[s.name] = s
	}
	ep := endpoint.NewServer(ctx, id.Tokens,
		endpoint.WithName(c.Name),
		endpoint.WithAuthorizeServer(authorize.NewServer()),
		endpoint.WithAdditionalFunctionality(
			groupipam.NewServer(c.CidrPrefix, groupipam.WithCustomIPAMServer(singlepointipam.NewServer)),
			recvfd.NewServer(),
			mechanisms.NewServer(map[string]networkservice.NetworkServiceServer{
				vlanmech.MECHANISM: &vlanServer{byName: byName},
			}),
			sendfd.NewServer(),
		),
	)
	server := grpc.NewServer(id.ServerOptions()...)
	ep.Register(server)
	listenOn := &c.ListenOn
	node.Serving(ctx, cancel, "serving "+listenOn.String(), grpcutils.ListenAndServe(ctx, listenOn, server))

	dial := id.DialOptions(grpc.WithBlock())
	if c.RegisterService {
		ns := registryclient.NewNetworkServiceRegistryClient(ctx,
			registryclient.WithClientURL(&c.ConnectTo),
			registryclient.WithDialOptions(dial...),
			registryclient.WithAuthorizeNSRegistryClient(registryauthorize.NewNetworkServiceRegistryClient(registryauthorize.WithPolicies(c.RegistryClientPolicies...))))
		for _, s := range c.Services {
			if _, err := ns.Register(ctx, &registryapi.NetworkService{Name: s.name, Payload: payload.Ethernet}); err != nil {
				log.FromContext(ctx).Fatalf("registering service %s: %v", s.name, err)
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
		NetworkServiceLabels: map[string]*registryapi.NetworkServiceLabels{},
		Url:                  listenOn.String(),
	}
	for _, s := range c.Services {
		me.NetworkServiceNames = append(me.NetworkServiceNames, s.name)
		me.NetworkServiceLabels[s.name] = &registryapi.NetworkServiceLabels{Labels: s.labels}
	}
	registered, err := nses.Register(ctx, me)
	if err != nil {
		log.FromContext(ctx).Fatalf("registering endpoint: %v", err)
	}
	log.FromContext(ctx).Infof("registered as %+v", registered)
	log.FromContext(ctx).Infof("startup completed in %v", time.Since(start))
	<-ctx.Done()
}
