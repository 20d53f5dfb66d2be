"""The search engine pieces memory plugins share: embedders, embedding input, text chunking.

Memory Core and Memory Records both rank with these, so a record and a file chunk of
the same text embed and tokenise alike. Everything here is provider-neutral: it knows
nothing of files, records or audiences.
"""

from ..._util import fixup_module_metadata as _fixup_module_metadata
from ._chunking import LineWindow as LineWindow
from ._chunking import chunk_id_for as chunk_id_for
from ._chunking import chunk_key as chunk_key
from ._chunking import estimate_tokens as estimate_tokens
from ._chunking import has_cjk as has_cjk
from ._chunking import is_cjk as is_cjk
from ._chunking import line_windows as line_windows
from ._chunking import sha256_hex as sha256_hex
from ._chunking import split_by_bytes as split_by_bytes
from ._chunking import split_lines as split_lines
from ._embedding_input import check_output as check_output
from ._embedding_input import combine_pieces as combine_pieces
from ._embedding_input import embed_texts as embed_texts
from ._embedding_input import plan_pieces as plan_pieces
from ._entries import entry_windows as entry_windows
from ._entries import markdown_entries as markdown_entries
from ._hash_embedder import HashEmbedder as HashEmbedder
from ._hash_embedder import stem as stem
from ._http_embedder import OpenAIEmbedder as OpenAIEmbedder
from ._http_embedder import embeddings_url as embeddings_url
from ._lexical import ANALYZER as ANALYZER
from ._lexical import any_of as any_of
from ._lexical import cjk_bigrams as cjk_bigrams
from ._lexical import document_analyzer as document_analyzer
from ._lexical import fallback_query_analyzer as fallback_query_analyzer
from ._lexical import lexical_search as lexical_search
from ._lexical import query_analyzer as query_analyzer
from ._st_embedder import BYTES_PER_POSITION as BYTES_PER_POSITION
from ._st_embedder import SentenceTransformerEmbedder as SentenceTransformerEmbedder
from ._st_embedder import max_input_bytes_for as max_input_bytes_for
from ._static_embedder import StaticEmbedder as StaticEmbedder
from ._static_embedder import StaticTable as StaticTable
from ._stopwords import QUERY_STOPWORDS as QUERY_STOPWORDS
from ._vectors import normalise_rows as normalise_rows
from ._vectors import product_slice as product_slice
from ._vectors import top_k as top_k
from ._wordpiece import WordPiece as WordPiece

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
