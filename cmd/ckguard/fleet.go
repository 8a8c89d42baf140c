package main

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex/store/shared"
)

// whoAmI names the person behind a command: the sudo caller when there is one, user@host.
func whoAmI() string {
	host, _ := os.Hostname()
	name := os.Getenv("SUDO_USER")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		} else {
			name = fmt.Sprint(os.Getuid())
		}
	}
	return name + "@" + host
}

func fleetCommand() *cli.Command {
	return &cli.Command{
		Name:  "fleet",
		Usage: "list the mounts of the store (--shared) with their version, last sync, lag and refusals in the last hour, and the shared pins",
		Description: "Reads the store's shared state folder, which every --shared mount heartbeats into after each sync: from any host\n" +
			"it shows what the whole fleet guards. LAG is how long ago the mount's last successful sync started; a mount whose\n" +
			"heartbeat is older than two sync intervals is STALE (stopped without unmounting, or cut off from the store).\n\n" +
			"EXAMPLES:\n" +
			"   ckguard fleet --store /srv/flink/checkpoints\n" +
			"   ckguard fleet --store s3://flink-state/checkpoints --json",
		Flags: append(locationFlags(), jsonFlag()),
		Action: func(c *cli.Context) error {
			if err := requireStore(c); err != nil {
				return err
			}
			area, err := openSharedArea(c)
			if err != nil {
				return err
			}
			if area == nil {
				return cli.Exit(fmt.Sprintf("%s has no shared state folder (%s): no mount of it runs with --shared; mount with --shared to share pins and see the fleet", c.String("store"), shared.Dir), 3)
			}
			mounts, err := shared.Mounts(c.Context, area)
			if err != nil {
				return err
			}
			pins, err := shared.NewPins(area, "").List(c.Context)
			if err != nil {
				return err
			}
			now := time.Now()
			slices.SortFunc(mounts, func(a, b shared.Mount) int { return a.Heartbeat.Compare(b.Heartbeat) * -1 })
			slices.SortFunc(pins, func(a, b shared.Pin) int { return a.Since.Compare(b.Since) })
			type row struct {
				shared.Mount
				State      string  `json:"state"`
				LagSeconds float64 `json:"lag_seconds"`
				// Outdated: what the mount does not do that this version relies on (shared.Outdated).
				Outdated string `json:"outdated,omitempty"`
			}
			rows := make([]row, 0, len(mounts))
			for _, m := range mounts {
				rows = append(rows, row{Mount: m, State: fleetState(m, now), LagSeconds: lag(m, now).Seconds(), Outdated: shared.Outdated(m)})
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"area": area.Where(), "mounts": rows, "pins": pins})
			}
			var outdated []string
			for _, r := range rows {
				if r.Outdated != "" && r.State != "stopped" && r.State != "stale" {
					outdated = append(outdated, fmt.Sprintf("OUTDATED: %s (%s, ckguard %s): %s", shown(r.Host), shown(r.ID), shown(r.Version), r.Outdated))
				}
			}
			w := tabwriter.NewWriter(c.App.Writer, 2, 4, 2, ' ', 0)
			fmt.Fprintf(w, "HOST\tSTATE\tVERSION\tLAST SYNC\tLAG\tREFUSALS 1H\tMOUNTPOINT\tINDEX\n")
			for _, r := range rows {
				last := "never"
				if !r.LastSync.IsZero() {
					last = fmtTime(r.LastSync)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", shown(r.Host), r.State, shown(r.Version), last, lag(r.Mount, now).Round(time.Second), r.Refusals1h, shown(r.Mountpoint), shown(r.Index))
			}
			_ = w.Flush()
			for _, o := range outdated {
				fmt.Fprintln(c.App.Writer, o)
			}
			active := 0
			for _, p := range pins {
				if p.Active(now) {
					active++
				}
			}
			fmt.Fprintf(c.App.Writer, "\n%d pins (%d active) in %s\n", len(pins), active, area.Where())
			w = tabwriter.NewWriter(c.App.Writer, 2, 4, 2, ' ', 0)
			for _, p := range pins {
				if !p.Pinned {
					continue
				}
				exp := "never"
				if !p.Expires.IsZero() {
					exp = fmtTime(p.Expires)
					if !p.Active(now) {
						exp += " (expired)"
					}
				}
				// Keys are paths the store's users chose; by and why are text from any host of the fleet.
				fmt.Fprintf(w, "  %s\tsince %s\tby %s\texpires %s\t%s\n", shown(p.Key), fmtTime(p.Since), shown(p.By), exp, shown(p.Why))
			}
			return w.Flush()
		},
	}
}

// lag is how long ago the mount's last successful sync started, by this host's clock.
func lag(m shared.Mount, now time.Time) time.Duration {
	if m.LastSync.IsZero() {
		return now.Sub(m.Started)
	}
	return now.Sub(m.LastSync)
}

// fleetState: stopped (unmounted cleanly), stale (no heartbeat for two sync intervals: crashed or cut
// off), failing (its last sync or pins read failed), ok.
func fleetState(m shared.Mount, now time.Time) string {
	switch {
	case m.Stopped:
		return "stopped"
	case !shared.Live(m, now):
		return "stale"
	case m.SyncError != "" || m.PinsError != "":
		return "failing"
	}
	return "ok"
}
