// nsc: an NSM client (sdk networkservice/chains/client) that requests each of
// NSM_NETWORK_SERVICES (kernel://service/ifname?label=value) from the nsmgr at NSM_CONNECT_TO,
// passing its own namespace by fd, keeps the connections refreshed and healed (with the
// data-path liveness check of sdk-kernel: ping through the interface, NSM_LIVENESS_CHECK_*),
// serves DNS on NSM_LOCAL_DNS_SERVER_ADDRESS when enabled, and closes them on SIGTERM.
// Configured as NSM's nsc command is.
package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/edwarnicke/genericsync"
	"google.golang.org/grpc"

	"github.com/networkservicemesh/api/pkg/api/networkservice"
	kernelmech "github.com/networkservicemesh/api/pkg/api/networkservice/mechanisms/kernel"
	kernelheal "github.com/networkservicemesh/sdk-kernel/pkg/kernel/tools/heal"

	"github.com/networkservicemesh/sdk/pkg/networkservice/chains/client"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/authorize"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/clientinfo"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/excludedprefixes"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/heal"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/mechanisms"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/mechanisms/kernel"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/mechanisms/sendfd"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/null"
	"github.com/networkservicemesh/sdk/pkg/networkservice/common/upstreamrefresh"
	"github.com/networkservicemesh/sdk/pkg/networkservice/connectioncontext/dnscontext"
	"github.com/networkservicemesh/sdk/pkg/networkservice/core/chain"
	"github.com/networkservicemesh/sdk/pkg/tools/awarenessgroups"
	"github.com/networkservicemesh/sdk/pkg/tools/dnsutils"
	"github.com/networkservicemesh/sdk/pkg/tools/dnsutils/cache"
	dnschain "github.com/networkservicemesh/sdk/pkg/tools/dnsutils/chain"
	"github.com/networkservicemesh/sdk/pkg/tools/dnsutils/checkmsg"
	"github.com/networkservicemesh/sdk/pkg/tools/dnsutils/dnsconfigs"
	"github.com/networkservicemesh/sdk/pkg/tools/dnsutils/fanout"
	"github.com/networkservicemesh/sdk/pkg/tools/dnsutils/noloop"
	"github.com/networkservicemesh/sdk/pkg/tools/dnsutils/searches"
	"github.com/networkservicemesh/sdk/pkg/tools/grpcutils"
	"github.com/networkservicemesh/sdk/pkg/tools/log"
	"github.com/networkservicemesh/sdk/pkg/tools/nsurl"

	"quiver.interop/nsm/internal/node"
)

type config struct {
	Name                  string                  `default:"nsc"`
	ConnectTo             url.URL                 `default:"unix:///var/lib/networkservicemesh/nsm.io.sock" split_words:"true"`
	DialTimeout           time.Duration           `default:"5s" split_words:"true"`
	RequestTimeout        time.Duration           `default:"15s" split_words:"true"`
	MaxTokenLifetime      time.Duration           `default:"10m" split_words:"true"`
	NetworkServices       []url.URL               `default:"" split_words:"true"`
	AwarenessGroups       awarenessgroups.Decoder `split_words:"true"`
	LogLevel              string                  `default:"INFO" split_words:"true"`
	LocalDNSServerEnabled bool                    `default:"true" split_words:"true"`
	LocalDNSServerAddress string                  `default:"127.0.0.1:53" split_words:"true"`
	LivenessCheckEnabled  bool                    `default:"true" split_words:"true"`
	LivenessCheckInterval time.Duration           `default:"200ms" split_words:"true"`
	LivenessCheckTimeout  time.Duration           `default:"1s" split_words:"true"`
}

// watch follows the nsmgr's view of connection id (its INITIAL_STATE_TRANSFER, then events),
// so a re-request after a restart takes up the connection it left.
func watch(ctx context.Context, mon networkservice.MonitorConnectionClient, id string) *genericsync.Map[string, *networkservice.Connection] {
	var seen genericsync.Map[string, *networkservice.Connection]
	stream, err := mon.MonitorConnections(ctx, &networkservice.MonitorScopeSelector{
		PathSegments: []*networkservice.PathSegment{{Id: id}},
	})
	if err != nil {
		log.FromContext(ctx).Errorf("MonitorConnections: %v", err)
		return &seen
	}
	first, err := stream.Recv()
	if err != nil {
		log.FromContext(ctx).Errorf("MonitorConnections: %v", err)
		return &seen
	}
	for k, conn := range first.GetConnections() {
		seen.Store(k, conn)
	}
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			for k, conn := range ev.GetConnections() {
				if ev.GetType() == networkservice.ConnectionEventType_DELETE {
					conn.State = networkservice.State_DOWN
				}
				seen.Store(k, conn)
			}
		}
	}()
	return &seen
}

// request builds the Request for service u as connection id, taking up a connection the nsmgr
// still knows; one that is down and fails the liveness check is reselected.
func request(ctx context.Context, c *config, id string, u *url.URL, seen *genericsync.Map[string, *networkservice.Connection]) *networkservice.NetworkServiceRequest {
	ns := (*nsurl.NSURL)(u)
	req := &networkservice.NetworkServiceRequest{
		Connection:           &networkservice.Connection{Id: id, NetworkService: ns.NetworkService(), Labels: ns.Labels()},
		MechanismPreferences: []*networkservice.Mechanism{ns.Mechanism()},
	}
	seen.Range(func(_ string, conn *networkservice.Connection) bool {
		p := conn.GetPath()
		if p.GetIndex() == 1 && p.GetPathSegments()[0].GetId() == id && conn.GetMechanism().GetType() == ns.Mechanism().GetType() {
			req.Connection = conn.Clone()
			req.Connection.Path.Index = 0
			req.Connection.Id = id
			return false
		}
		return true
	})
	checkCtx, done := context.WithTimeout(ctx, c.LivenessCheckTimeout)
	defer done()
	if req.GetConnection().GetState() == networkservice.State_DOWN &&
		(!c.LivenessCheckEnabled || !kernelheal.KernelLivenessCheck(checkCtx, req.GetConnection())) {
		log.FromContext(ctx).Infof("endpoint %s unavailable: reselecting", req.GetConnection().GetNetworkServiceEndpointName())
		req.Connection.Mechanism = nil
		req.Connection.NetworkServiceEndpointName = ""
		req.Connection.State = networkservice.State_RESELECT_REQUESTED
	}
	return req
}

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var c config
	node.Env(&c)
	if len(c.NetworkServices) == 0 {
		fmt.Fprintln(os.Stderr, "nsc: NSM_NETWORK_SERVICES is empty")
		os.Exit(2)
	}
	ctx = node.Logger(ctx, "nsc", c.LogLevel)
	logger := log.FromContext(ctx)
	logger.Infof("config: %+v", c)
	id := node.NewIdentity(ctx, c.MaxTokenLifetime)
	dial := id.DialOptions()

	dnsClient := null.NewClient()
	if c.LocalDNSServerEnabled {
		configs := new(genericsync.Map[string, []*networkservice.DNSConfig])
		dnsClient = dnscontext.NewClient(dnscontext.WithChainContext(ctx), dnscontext.WithDNSConfigsMap(configs))
		handler := dnschain.NewDNSHandler(checkmsg.NewDNSHandler(), dnsconfigs.NewDNSHandler(configs),
			searches.NewDNSHandler(), noloop.NewDNSHandler(), cache.NewDNSHandler(), fanout.NewDNSHandler())
		go dnsutils.ListenAndServe(ctx, handler, c.LocalDNSServerAddress)
	}
	healOpts := []heal.Option{heal.WithLivenessCheckInterval(c.LivenessCheckInterval), heal.WithLivenessCheckTimeout(c.LivenessCheckTimeout)}
	if c.LivenessCheckEnabled {
		healOpts = append(healOpts, heal.WithLivenessCheck(kernelheal.KernelLivenessCheck))
	}
	nsmClient := client.NewClient(ctx,
		client.WithClientURL(&c.ConnectTo),
		client.WithName(c.Name),
		client.WithAuthorizeClient(authorize.NewClient()),
		client.WithHealClient(heal.NewClient(ctx, healOpts...)),
		client.WithAdditionalFunctionality(
			clientinfo.NewClient(),
			upstreamrefresh.NewClient(ctx),
			mechanisms.NewClient(map[string]networkservice.NetworkServiceClient{
				kernelmech.MECHANISM: chain.NewNetworkServiceClient(kernel.NewClient()),
			}),
			sendfd.NewClient(),
			dnsClient,
			excludedprefixes.NewClient(excludedprefixes.WithAwarenessGroups(c.AwarenessGroups)),
		),
		client.WithDialTimeout(c.DialTimeout),
		client.WithDialOptions(dial...),
	)

	sigCtx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer stop()
	dialCtx, dialDone := context.WithTimeout(sigCtx, c.DialTimeout)
	defer dialDone()
	logger.Infof("connecting to nsmgr %s", c.ConnectTo.String())
	cc, err := grpc.DialContext(dialCtx, grpcutils.URLToTarget(&c.ConnectTo), dial...)
	if err != nil {
		logger.Fatalf("dialing nsmgr: %v", err)
	}
	mon := networkservice.NewMonitorConnectionClient(cc)

	var established []*networkservice.Connection
	for i := range c.NetworkServices {
		connID := fmt.Sprintf("%s-%d", c.Name, i)
		monCtx, monDone := context.WithTimeout(sigCtx, c.RequestTimeout)
		seen := watch(monCtx, mon, connID)
		for sigCtx.Err() == nil {
			reqCtx, reqDone := context.WithTimeout(ctx, c.RequestTimeout)
			started := time.Now()
			conn, err := nsmClient.Request(reqCtx, request(ctx, &c, connID, &c.NetworkServices[i], seen))
			reqDone()
			if err != nil {
				logger.Errorf("Request %s: %v", connID, err)
				continue
			}
			logger.Infof("connected to %s in %v: %v", conn.GetNetworkService(), time.Since(started), conn)
			established = append(established, conn)
			break
		}
		monDone()
	}
	<-sigCtx.Done()
	for _, conn := range established {
		closeCtx, closeDone := context.WithTimeout(ctx, c.RequestTimeout)
		if _, err := nsmClient.Close(closeCtx, conn); err != nil {
			logger.Errorf("Close %s: %v", conn.GetId(), err)
		}
		closeDone()
	}
}
