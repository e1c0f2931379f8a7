-- A key's objective: the InferenceObjective its requests name, in the
-- x-gateway-inference-objective header, to backends with
-- inference_extension. '' sends none.
ALTER TABLE api_keys ADD COLUMN objective TEXT NOT NULL DEFAULT '';
