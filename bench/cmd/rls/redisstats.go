package main

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	calls int64
	usec  float64
}

// redisStats is what the server spent: per command from INFO commandstats
// (since CONFIG RESETSTAT), and its CPU seconds from INFO cpu.
type redisStats struct {
	cmds map[string]cmdStat
	cpu  float64 // used_cpu_user + used_cpu_sys, seconds since start
}

// harnessCmds are the commands this program sends itself; they are not
// the servers' cost.
var harnessCmds = map[string]bool{"info": true, "config|resetstat": true, "flushall": true, "config": true}

// containerCmds run other commands, which INFO commandstats counts both on
// their own lines and in the container's time.
var containerCmds = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true,
	"fcall": true, "fcall_ro": true, "exec": true}

func readRedisStats(ctx context.Context, rc *redis.Client) (redisStats, error) {
	cs, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		return redisStats{}, err
	}
	cpu, err := rc.Info(ctx, "cpu").Result()
	if err != nil {
		return redisStats{}, err
	}
	return redisStats{cmds: parseCommandStats(cs), cpu: parseCPU(cpu)}, nil
}

// parseCommandStats reads lines like
// "cmdstat_evalsha:calls=3,usec=61,usec_per_call=20.33,...".
func parseCommandStats(info string) map[string]cmdStat {
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		name, ok = strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		out[name] = st
	}
	return out
}

// parseCPU returns used_cpu_user + used_cpu_sys of INFO cpu, in seconds.
func parseCPU(info string) float64 {
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// serverUsec is the time the servers' commands took in Redis, by INFO
// commandstats: when scripts (or MULTI/EXEC) ran, only theirs, since the
// commands they run are counted in them as well as on their own lines;
// otherwise every command's. The commands of this program are left out.
func serverUsec(cmds map[string]cmdStat) (usec float64, calls int64) {
	containers := false
	for name, st := range cmds {
		if containerCmds[name] && st.calls > 0 {
			containers = true
		}
	}
	for name, st := range cmds {
		if harnessCmds[name] || (containers && !containerCmds[name]) {
			continue
		}
		usec += st.usec
		calls += st.calls
	}
	return usec, calls
}

// breakdown lists the commands that ran, as "name calls usec" per decision.
func breakdown(cmds map[string]cmdStat, decisions int64) string {
	if decisions <= 0 {
		return ""
	}
	var names []string
	for name, st := range cmds {
		if !harnessCmds[name] && st.calls > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for i, name := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		st := cmds[name]
		b.WriteString(name + " " + strconv.FormatFloat(float64(st.calls)/float64(decisions), 'f', 2, 64) +
			"×/" + strconv.FormatFloat(st.usec/float64(decisions), 'f', 2, 64) + "µs")
	}
	return b.String()
}
