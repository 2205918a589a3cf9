// Command drakit-bench-go is the Go reference of `make bench`: a small DRA
// kubelet plugin on k8s.io/dynamic-resource-allocation v0.37.2 (kubeletplugin +
// resourceslice), doing per claim the same durable work as drakit:
//
//   - prepare: checkpoint written atomically (temp file, write, fsync, rename, directory
//     fsync) with the claim in phase PrepareStarted, one CDI spec per claim written
//     atomically, checkpoint written again with PrepareCompleted; the CDI device IDs are
//     answered. With -write-status the claim's AllocatedDeviceStatus (a Ready condition per
//     device) is applied with server-side apply inside the call, as a new user of the helper
//     would do it (dra-example-driver writes its device status inside prepare too).
//   - unprepare: checkpoint written atomically without the claim, then the CDI spec removed
//     and its directory fsynced; with -write-status this driver's status entries are removed
//     by an apply without devices.
//
// It publishes -devices generated devices (dev-0 … dev-N-1, attributes index and uuid, as
// drakit's example discoverer `generate`) in one pool named after the node, 128 devices per
// ResourceSlice, through the helper's ResourceSlice controller.
//
// The REST client speaks JSON (ContentType application/json): client-go v0.37 defaults to
// protobuf, which drakit's embedded API server does not serve (415).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceac "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// devicesPerSlice is the API's limit for devices without taints, counters or list attributes.
const devicesPerSlice = 128

// uuidNamespace is drakit's example discoverer's namespace for the uuid attribute.
var uuidNamespace = uuid.MustParse("5d3ad1f4-4c55-4f7e-9a53-8d0b0a2f6e11")

type preparedDevice struct {
	Request      string   `json:"request"`
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
}

type claimRecord struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Phase     string           `json:"phase"`
	Devices   []preparedDevice `json:"devices"`
}

// checkpointFile is the on-disk shape: a SHA-256 checksum of the JSON of Claims.
type checkpointFile struct {
	Checksum string                  `json:"checksum"`
	Claims   map[string]*claimRecord `json:"claims"`
}

type driver struct {
	name        string
	node        string
	cdiDir      string
	checkpoint  string
	writeStatus bool
	client      kubernetes.Interface

	mu     sync.Mutex // the helper serialises calls; this guards the map anyway
	claims map[string]*claimRecord
}

// writeFileAtomically writes data to name: temp file in the same directory, write, fsync,
// rename, fsync of the directory.
func writeFileAtomically(name string, data []byte) error {
	dir := filepath.Dir(name)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmpName)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmpName, name); err != nil {
		return err
	}
	ok = true
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// saveCheckpoint writes the claims map (caller holds d.mu).
func (d *driver) saveCheckpoint() error {
	body, err := json.Marshal(d.claims)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	data, err := json.Marshal(struct {
		Checksum string          `json:"checksum"`
		Claims   json.RawMessage `json:"claims"`
	}{hex.EncodeToString(sum[:]), body})
	if err != nil {
		return err
	}
	return writeFileAtomically(d.checkpoint, data)
}

func (d *driver) loadCheckpoint() error {
	data, err := os.ReadFile(d.checkpoint)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var raw struct {
		Checksum string          `json:"checksum"`
		Claims   json.RawMessage `json:"claims"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("checkpoint %s: %w", d.checkpoint, err)
	}
	sum := sha256.Sum256(raw.Claims)
	if hex.EncodeToString(sum[:]) != raw.Checksum {
		return fmt.Errorf("checkpoint %s: checksum mismatch", d.checkpoint)
	}
	return json.Unmarshal(raw.Claims, &d.claims)
}

func (d *driver) cdiKind() string { return d.name + "/device" }

func (d *driver) specPath(uid string) string {
	return filepath.Join(d.cdiDir, strings.ReplaceAll(d.name, "/", "_")+"-device_"+uid+".json")
}

type cdiDevice struct {
	Name           string `json:"name"`
	ContainerEdits struct {
		Env []string `json:"env"`
	} `json:"containerEdits"`
}

type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

func envName(s string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_", "/", "_").Replace(s))
}

func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devices, err := d.prepare(ctx, c)
		out[c.UID] = kubeletplugin.PrepareResult{Err: err, Devices: devices}
	}
	return out, nil
}

func (d *driver) prepare(ctx context.Context, c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	uid := string(c.UID)
	d.mu.Lock()
	rec, known := d.claims[uid]
	if !known || rec.Phase != "PrepareCompleted" {
		rec = &claimRecord{Namespace: c.Namespace, Name: c.Name, Phase: "PrepareStarted"}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != d.name {
				continue
			}
			id := fmt.Sprintf("%s=%s-%s", d.cdiKind(), uid, r.Device)
			rec.Devices = append(rec.Devices, preparedDevice{Request: r.Request, Pool: r.Pool, Device: r.Device, CDIDeviceIDs: []string{id}})
		}
		d.claims[uid] = rec
		if err := d.saveCheckpoint(); err != nil {
			delete(d.claims, uid)
			d.mu.Unlock()
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		spec := cdiSpec{Version: "0.5.0", Kind: d.cdiKind()}
		for _, dev := range rec.Devices {
			cd := cdiDevice{Name: uid + "-" + dev.Device}
			cd.ContainerEdits.Env = []string{fmt.Sprintf("DRAKIT_DEVICE_%s=%s/%s", envName(dev.Device), dev.Pool, dev.Device)}
			spec.Devices = append(spec.Devices, cd)
		}
		data, err := json.Marshal(spec)
		if err == nil {
			err = writeFileAtomically(d.specPath(uid), data)
		}
		if err != nil {
			d.mu.Unlock()
			return nil, fmt.Errorf("CDI spec: %w", err)
		}
		rec.Phase = "PrepareCompleted"
		if err := d.saveCheckpoint(); err != nil {
			d.mu.Unlock()
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
	}
	devices := make([]kubeletplugin.Device, 0, len(rec.Devices))
	for _, dev := range rec.Devices {
		devices = append(devices, kubeletplugin.Device{Requests: []string{dev.Request}, PoolName: dev.Pool, DeviceName: dev.Device, CDIDeviceIDs: dev.CDIDeviceIDs})
	}
	d.mu.Unlock()
	if d.writeStatus {
		d.applyStatus(ctx, c.Namespace, c.Name, c.UID, rec.Devices)
	}
	return devices, nil
}

// applyStatus applies this driver's status.devices entries of the claim (none: removes
// them). A failure is logged, not returned (as in dra-example-driver).
func (d *driver) applyStatus(ctx context.Context, namespace, name string, uid types.UID, devices []preparedDevice) {
	status := resourceac.ResourceClaimStatus()
	now := metav1.NewTime(time.Now())
	for _, dev := range devices {
		status.WithDevices(resourceac.AllocatedDeviceStatus().
			WithDriver(d.name).WithPool(dev.Pool).WithDevice(dev.Device).
			WithConditions(metav1ac.Condition().WithType("Ready").WithStatus(metav1.ConditionTrue).
				WithReason("Prepared").WithMessage("device prepared by the Go reference driver").
				WithLastTransitionTime(now)))
	}
	ac := resourceac.ResourceClaim(name, namespace).WithUID(uid).WithStatus(status)
	_, err := d.client.ResourceV1().ResourceClaims(namespace).ApplyStatus(ctx, ac,
		metav1.ApplyOptions{FieldManager: d.name, Force: true})
	if err != nil {
		klog.FromContext(ctx).Error(err, "applying AllocatedDeviceStatus", "claim", namespace+"/"+name)
	}
}

func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = d.unprepare(ctx, c)
	}
	return out, nil
}

func (d *driver) unprepare(ctx context.Context, c kubeletplugin.NamespacedObject) error {
	uid := string(c.UID)
	d.mu.Lock()
	rec, known := d.claims[uid]
	if !known {
		d.mu.Unlock()
		return nil
	}
	delete(d.claims, uid)
	if err := d.saveCheckpoint(); err != nil {
		d.claims[uid] = rec
		d.mu.Unlock()
		return fmt.Errorf("checkpoint: %w", err)
	}
	err := os.Remove(d.specPath(uid))
	if err == nil {
		err = syncDir(d.cdiDir)
	} else if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	if d.writeStatus && rec.Phase == "PrepareCompleted" {
		d.applyStatus(ctx, c.Namespace, c.Name, c.UID, nil)
	}
	return nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

func (d *driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// generatedDevices mirrors drakit's example discoverer `generate: {count, prefix}`.
func generatedDevices(count int, prefix string) []resourceapi.Device {
	out := make([]resourceapi.Device, count)
	for i := range out {
		name := fmt.Sprintf("%s-%d", prefix, i)
		index := int64(i)
		id := uuid.NewSHA1(uuidNamespace, []byte(name)).String()
		out[i] = resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"index": {IntValue: &index},
			"uuid":  {StringValue: &id},
		}}
	}
	return out
}

func main() {
	var (
		kubeconfig   = flag.String("kubeconfig", "", "kubeconfig of the API server")
		driverName   = flag.String("driver-name", "bench.go.example.com", "DRA driver name")
		nodeName     = flag.String("node-name", "", "node name (required)")
		registrarDir = flag.String("kubelet-registrar-directory-path", kubeletplugin.KubeletRegistryDir, "kubelet's plugin registration directory")
		pluginDir    = flag.String("kubelet-plugins-directory-path", "", "plugin data directory (socket, checkpoint)")
		cdiDir       = flag.String("cdi-dir", "/var/run/cdi", "CDI spec directory")
		count        = flag.Int("devices", 1000, "generated devices to publish")
		writeStatus  = flag.Bool("write-status", false, "apply the claims' AllocatedDeviceStatus in prepare / unprepare")
		serialize    = flag.Bool("serialize", true, "let the helper serialise gRPC calls (its default)")
	)
	klog.InitFlags(nil)
	flag.Parse()
	if *nodeName == "" || *pluginDir == "" {
		fmt.Fprintln(os.Stderr, "-node-name and -kubelet-plugins-directory-path are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background()
	ctx = klog.NewContext(ctx, logger)

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		logger.Error(err, "kubeconfig")
		os.Exit(1)
	}
	// The embedded API server speaks JSON only; client-go v0.37 defaults to protobuf.
	cfg.ContentType = "application/json"
	cfg.AcceptContentTypes = "application/json"
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit (the bench measures the server side)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		logger.Error(err, "client")
		os.Exit(1)
	}
	for _, dir := range []string{*pluginDir, *cdiDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			logger.Error(err, "mkdir", "dir", dir)
			os.Exit(1)
		}
	}
	d := &driver{name: *driverName, node: *nodeName, cdiDir: *cdiDir,
		checkpoint: filepath.Join(*pluginDir, "checkpoint.json"), writeStatus: *writeStatus,
		client: client, claims: map[string]*claimRecord{}}
	if err := d.loadCheckpoint(); err != nil {
		logger.Error(err, "checkpoint")
		os.Exit(1)
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.KubeClient(client),
		kubeletplugin.DriverName(*driverName),
		kubeletplugin.NodeName(*nodeName),
		kubeletplugin.RegistrarDirectoryPath(*registrarDir),
		kubeletplugin.PluginDataDirectoryPath(*pluginDir),
		kubeletplugin.Serialize(*serialize),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		logger.Error(err, "start helper")
		os.Exit(1)
	}
	defer helper.Stop()

	devices := generatedDevices(*count, "dev")
	var slices []resourceslice.Slice
	for start := 0; start < len(devices); start += devicesPerSlice {
		end := min(start+devicesPerSlice, len(devices))
		slices = append(slices, resourceslice.Slice{Devices: devices[start:end]})
	}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{*nodeName: {Slices: slices}},
	}); err != nil {
		logger.Error(err, "publish")
		os.Exit(1)
	}
	logger.Info("started", "driver", *driverName, "devices", len(devices), "slices", len(slices), "checkpointedClaims", len(d.claims), "writeStatus", *writeStatus)
	<-ctx.Done()
	logger.Info("stopping")
}
