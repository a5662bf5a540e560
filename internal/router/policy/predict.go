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

package policy

// PredictTTFT is the TTFT (seconds) Pick would predict on endpoint for work tokens of prefill
// queued ahead of and including a request. calibrated is false while the prediction stands on
// the static priors alone (neither this endpoint nor any other has been timed enough): admission
// control then bounds the queue by length instead, since a prior can be off by an order of
// magnitude on unknown hardware.
func (p *Policy) PredictTTFT(endpoint string, work int) (seconds float64, calibrated bool) {
	if m := p.models[endpoint]; m != nil && m.Calibrated() {
		calibrated = true
	} else {
		_, _, calibrated = p.fleetFit(endpoint)
	}
	return p.predict(endpoint, work), calibrated
}
