package server_test

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// TestE2ETwoInstances runs two `tandem serve` on the same control database
// and Redis: a change made through one is applied by the other.
func TestE2ETwoInstances(t *testing.T) {
	cfg, _ := MustConfig(t)
	one := MustRunMain(t, cfg)
	two := MustRunMain(t, cfg)
	podA, podB := cfg.Pods[0].Name, cfg.Pods[1].Name

	t.Run("KillSwitchReachesTheOtherInstance", func(t *testing.T) {
		one.Admin.tb, two.Admin.tb = t, t
		// Propagation is measured and logged, not asserted: the deadline of
		// eventually is only there to end a broken run.
		var engage, disengage []time.Duration
		for i := 0; i < 20; i++ {
			start := time.Now()
			one.Admin.must(http.MethodPost, "/admin/killswitch", obj{"reason": "propagation", "pods": []string{podA}}, http.StatusOK)
			poll(t, "the other instance to see the kill switch engaged", time.Millisecond, func() bool {
				return podStatus(two.Admin, podA)["kill_switch"] == true
			})
			engage = append(engage, time.Since(start))

			start = time.Now()
			one.Admin.must(http.MethodDelete, "/admin/killswitch", obj{"reason": "propagation", "pods": []string{podA}}, http.StatusOK)
			poll(t, "the other instance to see the kill switch released", time.Millisecond, func() bool {
				return podStatus(two.Admin, podA)["kill_switch"] == false
			})
			disengage = append(disengage, time.Since(start))
		}
		all := append(slices.Clone(engage), disengage...)
		t.Logf("kill-switch propagation to another instance (request sent to first observation through its admin API, %d samples): "+
			"p50 %v p99 %v max %v (engage p50 %v, disengage p50 %v)",
			len(all), pct(all, 0.50), pct(all, 0.99), pct(all, 1), pct(engage, 0.50), pct(disengage, 0.50))
	})

	t.Run("FleetWideKillSwitchReachesTheOtherInstance", func(t *testing.T) {
		one.Admin.tb, two.Admin.tb = t, t
		one.Admin.must(http.MethodPost, "/admin/killswitch", obj{"reason": "fleet-wide"}, http.StatusOK)
		eventually(t, "the other instance to see the fleet-wide kill switch", func() bool {
			ks := two.Admin.must(http.MethodGet, "/admin/killswitch", nil, http.StatusOK)
			return ks["engaged"] == true && len(strs(ks["pods"])) == 2
		})
		one.Admin.must(http.MethodDelete, "/admin/killswitch", obj{"reason": "over"}, http.StatusOK)
		eventually(t, "the other instance to see the kill switch off", func() bool {
			return two.Admin.must(http.MethodGet, "/admin/killswitch", nil, http.StatusOK)["engaged"] == false
		})
	})

	t.Run("ModeChangeReachesTheOtherInstance", func(t *testing.T) {
		one.Admin.tb, two.Admin.tb, two.Checkout.tb = t, t, t
		start := time.Now()
		enterShadow(one.Admin, podB, "two instances")
		eventually(t, "the other instance to apply the mode change", func() bool {
			return podStatus(two.Admin, podB)["mode"] == "shadow"
		})
		t.Logf("mode change propagation to another instance: %v", time.Since(start))
		two.Checkout.must(http.MethodPut, inventoryPath(shopB, 5, 1), obj{"on_hand": 2}, http.StatusOK)
		inv := two.Checkout.must(http.MethodGet, inventoryPath(shopB, 5, 1), nil, http.StatusOK)
		stores, _ := inv["stores"].(obj)
		if stores["mysql"] == nil {
			t.Errorf("got stores %v on the other instance, want mysql maintained in shadow", stores)
		}
	})

	t.Run("InstancesListsBothWithTheSameVersion", func(t *testing.T) {
		one.Admin.tb = t
		eventually(t, "both instances at the same control version", func() bool {
			got := one.Admin.must(http.MethodGet, "/admin/instances", nil, http.StatusOK)
			versions := map[string]int64{}
			for _, i := range asSlice(got["instances"]) {
				i := i.(obj)
				if i["stale"] == false {
					versions[i["id"].(string)] = num(i["control_version"])
				}
			}
			v1, ok1 := versions[one.Main.InstanceID]
			v2, ok2 := versions[two.Main.InstanceID]
			return ok1 && ok2 && v1 == v2 && v1 > 0
		})
	})
}

// pct returns the q-quantile of ds by nearest rank.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s)) + 0.5)
	if i < 1 {
		i = 1
	}
	if i > len(s) {
		i = len(s)
	}
	return s[i-1].Round(10 * time.Microsecond)
}
