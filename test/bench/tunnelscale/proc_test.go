package main

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestCPUFloor checks the floor's sums: what every process took, without the simulated
// agents, and the replicas' own, each over the machine's cores; a process started since the
// first reading counts from zero, the replicas' etcd is not a replica.
func TestCPUFloor(t *testing.T) {
	kinds := map[int]string{1: kindAgents, 2: kindReplica + " replica 1", 3: kindReplica + " replica 3", 4: kindReplica + "'s etcd", 5: "host kube-apiserver"}
	label := func(pid int, _ string) string { return kinds[pid] }
	before := map[int]procCPU{1: {"tunnelscale", 10 * time.Second}, 2: {"mount-apiserver", time.Second}, 4: {"etcd", 0}, 5: {"kube-apiserver", 0}}
	after := map[int]procCPU{1: {"tunnelscale", 30 * time.Second}, 2: {"mount-apiserver", 5 * time.Second}, 3: {"mount-apiserver", 4 * time.Second}, 4: {"etcd", 6 * time.Second}, 5: {"kube-apiserver", 10 * time.Second}}
	// All: 20 + 4 + 4 + 6 + 10 = 44 s; without the agents 24 s; the replicas 8 s.
	got := cpuFloor(before, after, label, 30*time.Second)
	n := float64(runtime.NumCPU())
	for _, want := range []string{fmtSeconds(44 / n), "it took 30.0 s", fmtSeconds(24/n) + " without the agent simulators", fmtSeconds(8/n) + " for mount-apiserver alone"} {
		if !strings.Contains(got, want) {
			t.Errorf("cpuFloor = %q, want it to say %q", got, want)
		}
	}
}

func fmtSeconds(s float64) string { return fmt.Sprintf("%.1f s", s) }
