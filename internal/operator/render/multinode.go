/*
Copyright 2026 The kvrouter Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package render

import (
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/kvrouter/kvrouter/api/v1alpha1"
)

// multiNodeArgs start vLLM's multiprocessing executor across the pods of one LeaderWorkerSet
// group: the leader is node 0 and serves the API; each worker joins it headless. The kubelet
// expands $(LWS_...) from the variables LeaderWorkerSet injects into every pod of a group. This
// needs no Ray cluster and keeps the leader's command the plain `vllm serve` of the contract.
func multiNodeArgs(kvr *v1alpha1.KVRouter, role engineRole) []string {
	rank := "0"
	if role == roleWorker {
		rank = "$(" + lwsv1.LwsWorkerIndex + ")"
	}
	args := []string{
		"--distributed-executor-backend", "mp",
		"--nnodes", strconv.Itoa(int(kvr.Spec.Engine.NodesPerReplica)),
		"--node-rank", rank,
		"--master-addr", "$(" + lwsv1.LwsLeaderAddress + ")",
	}
	if role == roleWorker {
		args = append(args, "--headless")
	}
	return args
}

// engineLeaderWorkerSet runs one replica as a group of spec.engine.nodesPerReplica pods (tensor
// parallel inside each node, pipeline parallel across them). A group is restarted as a whole when
// any of its pods restarts: a vLLM process group cannot re-admit a member.
func engineLeaderWorkerSet(kvr *v1alpha1.KVRouter, opts Options, pool Pool) (*lwsv1.LeaderWorkerSet, error) {
	leader, err := enginePodTemplate(kvr, opts, roleServer, pool)
	if err != nil {
		return nil, err
	}
	worker, err := enginePodTemplate(kvr, opts, roleWorker, pool)
	if err != nil {
		return nil, err
	}
	return &lwsv1.LeaderWorkerSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: lwsv1.GroupVersion.String(), Kind: "LeaderWorkerSet"},
		ObjectMeta: poolMeta(kvr, opts, pool),
		Spec: lwsv1.LeaderWorkerSetSpec{
			Replicas: poolReplicas(kvr, pool),
			LeaderWorkerTemplate: lwsv1.LeaderWorkerTemplate{
				LeaderTemplate: &leader,
				WorkerTemplate: worker,
				Size:           ptr.To(kvr.Spec.Engine.NodesPerReplica),
				RestartPolicy:  lwsv1.RecreateGroupOnPodRestart,
			},
			// Roll one group at a time without a surge group: a surge would need another
			// nodesPerReplica free GPU nodes, which GPU pools rarely have.
			RolloutStrategy: lwsv1.RolloutStrategy{
				Type: lwsv1.RollingUpdateStrategyType,
				RollingUpdateConfiguration: &lwsv1.RollingUpdateConfiguration{
					MaxUnavailable: intstr.FromInt32(1),
					MaxSurge:       intstr.FromInt32(0),
				},
			},
			// Workers start with the leader and wait for it in vLLM's own rendezvous.
			StartupPolicy: lwsv1.LeaderCreatedStartupPolicy,
		},
	}, nil
}
