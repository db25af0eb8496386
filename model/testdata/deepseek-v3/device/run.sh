set -e
cd .dev/schema
python fp8_cast_bf16.py --input-fp8-hf-path ds --output-bf16-hf-path ref 2>&1 | tail -3
python check.py ref ours $OUT/fp8_cast_bf16_check.json
cp check.py run.sh $OUT/
