package realnode

import (
	"fmt"
	"path/filepath"
)

// containerdConfig is containerd's configuration, its state in cd.
// restrict_oom_score_adj: these machines lack CAP_SYS_RESOURCE, runc cannot
// lower a container's oom_score_adj.
func containerdConfig(st *State, cd, cniConfDir string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[5]q
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %[6]q
      conf_dir = %[7]q
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = %[8]q
  [plugins."io.containerd.internal.v1.opt"]
    path = %[9]q
`, filepath.Join(cd, "root"), filepath.Join(cd, "state"), st.ContainerdSocket, st.ContainerdSocket+".ttrpc",
		PauseImage, cniBinDir, cniConfDir, filepath.Join(cd, "certs.d"), filepath.Join(cd, "opt"))
}

// cniConflist is the pod network as containerd's CNI sees it: pods on the
// bridge (host-local addresses from the pod range), routes only to the pod
// and service ranges, no masquerade, the host not their gateway.
func cniConflist(st *State, ipamDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "cozy-health",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": false,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q, "rangeStart": "10.244.0.10", "gateway": %q}]],
        "routes": [{"dst": %q, "gw": %q}],
        "dataDir": %q
      }
    }
  ]
}
`, st.Bridge, st.PodCIDR, st.Address, ServiceCIDR, st.Address, ipamDir)
}

// kubeletConfig is the kubelet's configuration: cgroupfs on a cgroup v1
// (hybrid) host, swap allowed, eviction and image GC thresholds low enough
// for a small disk and for images that are imported, never pulled; the
// cluster DNS on the bridge's address.
func (s *starter) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[4]q}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[5]s
podLogsDir: %[6]q
volumePluginDir: %[7]q
clusterDNS: [%[1]s]
clusterDomain: %[8]s
resolvConf: ""
makeIPTablesUtilChains: false
rotateCertificates: false
serverTLSBootstrap: false
registerNode: true
evictionHard: {memory.available: 100Mi, nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
`, s.st.Address, s.ports.kubelet, s.ports.kubeletHealthz, filepath.Join(s.pki, "client-ca.crt"), s.st.ContainerdSocket,
		filepath.Join(s.dir, "pod-logs"), filepath.Join(s.dir, "volume-plugins"), ClusterDomain)
}

// kubeProxyConfig is kube-proxy's configuration: nftables mode, Services on
// the bridge's address, conntrack left as it is.
func (s *starter) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: %[1]s
bindAddress: %[2]s
healthzBindAddress: 127.0.0.1:%[3]d
metricsBindAddress: 127.0.0.1:%[4]d
clientConnection: {kubeconfig: %[5]q}
clusterCIDR: %[6]s
nodePortAddresses: [%[2]s/32]
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`, s.st.Name, s.st.Address, s.ports.proxyHealthz, s.ports.proxyMetrics, s.proxyKubeconfig, s.st.PodCIDR)
}

// corefile is CoreDNS's configuration: the cluster's zone from the API;
// every other name is NXDOMAIN, as an upstream resolver would answer for a
// name that does not exist, and no query ever leaves the host.
func (s *starter) corefile() string {
	return fmt.Sprintf(`%[1]s:53 in-addr.arpa:53 {
    bind %[2]s
    errors
    kubernetes %[1]s in-addr.arpa {
        kubeconfig %[3]s
        pods insecure
        ttl 5
    }
    ready 127.0.0.1:%[4]d
}
.:53 {
    bind %[2]s
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
`, ClusterDomain, s.st.Address, s.n.cp.Kubeconfig, s.ports.dnsReady)
}
