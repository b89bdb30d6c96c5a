"""Cohere's Python client (cohere.ClientV2) embedding an image through flowline's /v2/embed (test_clip_encoder).

Usage: cohere_image_client.py URL IMAGE_FILE. Prints one JSON line: the answer's images metadata, the billed
images and the embedding's length, as the client parsed them.
"""

import base64
import json
import sys

import cohere


def main():
    url, image = sys.argv[1], sys.argv[2]
    with open(image, "rb") as f:
        data_uri = "data:image/png;base64," + base64.b64encode(f.read()).decode()
    client = cohere.ClientV2(base_url=url, api_key="unused", timeout=60)
    r = client.embed(model="clip", input_type="image", embedding_types=["float"], images=[data_uri])
    print(json.dumps({
        "images": [{"width": i.width, "height": i.height, "format": i.format, "bit_depth": i.bit_depth}
                   for i in r.images],
        "billed_images": r.meta.billed_units.images,
        "dims": len(r.embeddings.float_[0]),
    }))


if __name__ == "__main__":
    main()
