# GPU serving image for rayservice-frognano-4b.yaml: Ray 2.60 + CUDA vLLM 0.32 (Ray 2.60 breaks
# on vLLM 0.33; the ray[llm] extra would pin vLLM 0.29) + farm itself.
FROM rayproject/ray:2.60.0-py311-gpu
RUN pip install --no-cache-dir "vllm==0.32.0" "ray[serve]==2.60.0" pyarrow pandas fsspec jsonref
COPY . /opt/farm
RUN pip install --no-cache-dir --no-deps /opt/farm
