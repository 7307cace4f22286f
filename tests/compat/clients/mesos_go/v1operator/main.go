// Command v1operator drives Mesilla's v1 operator API of the master and of its
// first agent with mesos-go's httpmaster and httpagent senders, in JSON or
// protobuf: each answer must decode into mesos-go's Response of the call's type.
//
// Env MASTER (host:port). Prints "check passed" and exits 0, else exits 1 with the reasons.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/agent"
	agentcalls "github.com/mesos/mesos-go/api/v1/lib/agent/calls"
	"github.com/mesos/mesos-go/api/v1/lib/encoding/codecs"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/httpagent"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/httpmaster"
	"github.com/mesos/mesos-go/api/v1/lib/master"
	mastercalls "github.com/mesos/mesos-go/api/v1/lib/master/calls"
)

// Agent capabilities Mesos 1.11 reports that mesos-go 0.0.6's JSON decoder
// does not know (with Mesos's numbers); protobuf needs none of this.
var agentCapabilities = map[string]int32{"RESOURCE_PROVIDER": 4, "RESIZE_VOLUME": 5,
	"AGENT_OPERATION_FEEDBACK": 6, "AGENT_DRAINING": 7, "TASK_RESOURCE_LIMITS": 8}

func main() {
	codec := flag.String("codec", codecs.NameProtobuf, "json or protobuf")
	flag.Parse()
	for name, value := range agentCapabilities {
		mesos.AgentInfo_Capability_Type_name[value] = name
		mesos.AgentInfo_Capability_Type_value[name] = value
	}
	mediaType := codecs.MediaTypeProtobuf
	if *codec == "json" {
		mediaType = codecs.MediaTypeJSON
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	failures := 0
	check := func(what string, err error) {
		if err != nil {
			failures++
			fmt.Fprintf(os.Stderr, "FAIL: %s: %v\n", what, err)
		} else {
			fmt.Printf("ok: %s\n", what)
		}
	}

	masterSender := httpmaster.NewSender(httpcli.New(httpcli.Endpoint("http://"+os.Getenv("MASTER")+"/api/v1"),
		httpcli.Codec(codecs.ByMediaType[mediaType])).Send)
	askMaster := func(call *master.Call) (*master.Response, error) {
		resp, err := masterSender.Send(ctx, mastercalls.NonStreaming(call))
		if err != nil {
			return nil, err
		}
		defer resp.Close()
		var r master.Response
		if err := resp.Decode(&r); err != nil {
			return nil, err
		}
		if r.GetType().String() != call.GetType().String() {
			return nil, fmt.Errorf("answered %s", r.GetType())
		}
		return &r, nil
	}
	var agentAddress string
	for _, call := range []*master.Call{mastercalls.GetHealth(), mastercalls.GetVersion(), mastercalls.GetState(),
		mastercalls.GetAgents(), mastercalls.GetFrameworks(), mastercalls.GetTasks()} {
		r, err := askMaster(call)
		switch {
		case err != nil:
		case call.GetType() == master.Call_GET_HEALTH && !r.GetGetHealth().Healthy:
			err = fmt.Errorf("not healthy")
		case call.GetType() == master.Call_GET_VERSION && r.GetGetVersion().VersionInfo.Version == "":
			err = fmt.Errorf("no version")
		case call.GetType() == master.Call_GET_AGENTS:
			if agents := r.GetGetAgents().Agents; len(agents) == 0 || agents[0].GetPID() == "" {
				err = fmt.Errorf("no agent with a pid")
			} else {
				pid := agents[0].GetPID() // slave(1)@host:port
				for i := range pid {
					if pid[i] == '@' {
						agentAddress = pid[i+1:]
					}
				}
			}
		}
		check("master "+call.GetType().String(), err)
	}
	if agentAddress == "" {
		fmt.Fprintln(os.Stderr, "FAIL: no agent to ask")
		os.Exit(1)
	}
	agentSender := httpagent.NewSender(httpcli.New(httpcli.Endpoint("http://"+agentAddress+"/api/v1"),
		httpcli.Codec(codecs.ByMediaType[mediaType])).Send)
	for _, call := range []*agent.Call{agentcalls.GetHealth(), agentcalls.GetState(), agentcalls.GetContainers()} {
		resp, err := agentSender.Send(ctx, agentcalls.NonStreaming(call))
		if err == nil {
			var r agent.Response
			err = resp.Decode(&r)
			resp.Close()
			if err == nil && r.GetType().String() != call.GetType().String() {
				err = fmt.Errorf("answered %s", r.GetType())
			}
		}
		check("agent "+call.GetType().String(), err)
	}
	if failures > 0 {
		os.Exit(1)
	}
	fmt.Printf("ok: v1 operator check passed (codec=%s)\n", *codec)
}
