package history_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/history"
)

func TestRecorder(t *testing.T) {
	t.Run("KeepsTheLastHourPerPod", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var n atomic.Int64
			r := history.New(history.Config{Report: func(ctx context.Context) ([]tandem.Report, error) {
				c := n.Add(1)
				return []tandem.Report{{Pod: "pod-a", Comparisons: c}, {Pod: "pod-b", Comparisons: -c}}, nil
			}})
			r.Open()
			defer r.Close()
			time.Sleep(2 * time.Hour)
			synctest.Wait()
			got := r.History("pod-a")
			// An hour at 5 s, both ends included.
			if want := int(history.DefaultKeep/history.DefaultInterval) + 1; len(got) != want {
				t.Fatalf("got %d samples, want %d", len(got), want)
			}
			for i := 1; i < len(got); i++ {
				if got[i].At.Sub(got[i-1].At) != history.DefaultInterval || got[i].Comparisons != got[i-1].Comparisons+1 {
					t.Fatalf("sample %d: got %v after %v, want one interval later, in order", i, got[i].At, got[i-1].At)
				}
				if got[i].Pod != "pod-a" {
					t.Fatalf("sample %d: got pod %q, want pod-a", i, got[i].Pod)
				}
			}
			if last := got[len(got)-1]; last.Comparisons != n.Load() {
				t.Fatalf("got newest sample %d, want %d", last.Comparisons, n.Load())
			}
			if all := r.History(""); len(all) != 2*len(got) || all[0].Pod != "pod-a" || all[len(all)-1].Pod != "pod-b" {
				t.Fatalf("got %d samples of every pod, want %d, pod-a first", len(all), 2*len(got))
			}
			if got := r.History("pod-z"); len(got) != 0 {
				t.Fatalf("got %d samples of an unknown pod, want 0", len(got))
			}
		})
	})
	t.Run("SkipsAFailingReport", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var fail atomic.Bool
			r := history.New(history.Config{Report: func(ctx context.Context) ([]tandem.Report, error) {
				if fail.Load() {
					return nil, tandem.Errorf(tandem.EUNAVAILABLE, "control database down")
				}
				return []tandem.Report{{Pod: "pod-a"}}, nil
			}})
			r.Sample(context.Background())
			fail.Store(true)
			time.Sleep(time.Minute)
			r.Sample(context.Background())
			if got := r.History("pod-a"); len(got) != 1 {
				t.Fatalf("got %d samples, want the 1 before the failure", len(got))
			}
		})
	})
}
