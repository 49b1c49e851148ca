# CPU image of the evaluation cluster (raycluster-eval.yaml): farm with its k8s and s3 extras.
# No vLLM: the model is served by the RayService.
FROM rayproject/ray:2.60.0-py311
COPY . /opt/farm
RUN pip install --no-cache-dir "/opt/farm[k8s,s3]"
